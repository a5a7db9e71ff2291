package selfimprove

// This file makes the IDs the loop hands out: UUIDv7s for changes,
// events and proposals, and the call IDs a late score names a call by;
// and it keeps the keys of an agent's latest scores by ID, so that a
// retried score counts once.

import (
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// newID returns a UUIDv7: 48 bits of Unix milliseconds, then random bits.
// IDs are unique across processes and sort by time.
func newID(t time.Time) string {
	var b [16]byte
	crand.Read(b[6:])
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// The call ID: the low idVersionBits of the config version, then the low
// idTimeBits of the time the call ended in units of 2^idTimeShift ns
// (about a millisecond), then 16 bits of check: a keyed hash of the rest,
// of the time's high bits (which the ID does not carry: its time field
// wraps every 4.9 hours) and of the agent (the agent's key, callKeys), so
// that an ID of another agent, or a made-up one, is refused but with a
// chance of 1 in 65,536, and an ID whose time field has wrapped since is
// not taken for a recent call's.
const (
	idVersionBits = 24
	idTimeBits    = 24
	idTimeShift   = 20
	idLowBits     = idVersionBits + idTimeBits
	// scoreSkew is how far in the future a call ID may end: the clocks of
	// the loops that share a state directory may differ by this much.
	scoreSkew = time.Minute
	// idWraps is how many wraps of the time field back parseCallID looks
	// for the call, to tell a score too late from an unknown call: 2
	// wraps are 9.8 hours. Each wrap looked at is one more chance in
	// 65,536 that another agent's ID, or a made-up one, is refused as too
	// late rather than unknown (refused all the same).
	idWraps = 2
)

// callID is the ID of a call of the agent whose key is key (see callKeys)
// that ended at endN (Unix ns) under version.
func callID(endN int64, version int, key uint64) uint64 {
	units := uint64(endN) >> idTimeShift
	low := uint64(version)&(1<<idVersionBits-1) | units<<idVersionBits&(1<<idLowBits-1)
	return low | idCheck(low, units>>idTimeBits, key)
}

// parseCallID returns the low bits of the version of the call id names and
// how long ago, before now, it ended, for the agent whose key is key. It
// refuses an ID whose check is wrong for every time the ID may stand for
// (another agent's, made up, or older than idWraps wraps), and one that
// ended in the future or more than ScoreHorizon ago.
func parseCallID(id, key uint64, now time.Time) (version uint64, age time.Duration, err error) {
	low := id & (1<<idLowBits - 1)
	const wrap = 1 << idTimeBits
	// The latest time, in units, up to scoreSkew ahead of now, whose low
	// bits are the ID's; then one wrap ahead, and idWraps back.
	last := (uint64(now.Add(scoreSkew).UnixNano()) >> idTimeShift) &^ (wrap - 1)
	if last |= low >> idVersionBits; last > uint64(now.Add(scoreSkew).UnixNano())>>idTimeShift {
		last -= wrap
	}
	if id == 0 {
		return 0, 0, fmt.Errorf("%w: ID 0 names no call: a call its caller cancelled (Report.Ignored) or one that ran untracked is not booked, and its Report.ID is 0", ErrUnknownCall)
	}
	for k := -1; k <= idWraps; k++ {
		units := last - uint64(k)*wrap
		if id&^(1<<idLowBits-1) != idCheck(low, units>>idTimeBits, key) {
			continue
		}
		age = time.Duration(now.UnixNano() - int64(units<<idTimeShift))
		switch {
		case age < -scoreSkew:
			return 0, 0, fmt.Errorf("%w: ID %016x ends %v in the future", ErrUnknownCall, id, -age.Round(time.Second))
		case age > ScoreHorizon:
			return 0, 0, fmt.Errorf("%w: the call ended %v ago, more than %v", ErrScoreTooLate, age.Round(time.Second), ScoreHorizon)
		}
		return low & (1<<idVersionBits - 1), max(age, 0), nil
	}
	return 0, 0, fmt.Errorf("%w: ID %016x is not a call of this agent's (or one older than %v)", ErrUnknownCall, id, (time.Duration(idWraps*wrap) << idTimeShift).Round(time.Minute))
}

// idCheck is the check of an ID's low bits and of its time's high bits
// (epoch) for the agent's key, in place: the top bits of their mix times
// the golden ratio's odd constant (Fibonacci hashing: every bit reaches
// the top bits), two multiplications.
func idCheck(low, epoch, key uint64) uint64 {
	return (low ^ key ^ epoch*0xbf58476d1ce4e5b9) * 0x9e3779b97f4a7c15 >> idLowBits << idLowBits
}

// callKeys keys the check of the loop's call IDs: an agent's key is the
// first 8 bytes of SHA-256(secret, agent ID), the secret 32 bytes. The secret is the
// state directory's (a random one kept in its document "call-id-key",
// made on first use), so IDs stay valid across restarts; in memory
// (RAMStore) a random one; with a fleet a fixed one, since every replica
// must accept the IDs of the others: an ID is then bound to its agent,
// but the check is public, unless every replica sets the same secret
// with WithCallIDSecret (which replaces the store's too).
type callKeys struct{ secret []byte }

// of returns agentID's key.
func (k callKeys) of(agentID string) uint64 {
	var buf [64 + MaxAgentIDLen]byte // on the stack: Score allocates nothing
	sum := sha256.Sum256(append(append(buf[:0], k.secret...), agentID...))
	return binary.LittleEndian.Uint64(sum[:8])
}

// scoreKeys are the keys of an agent's latest scores by ID, a ring.
type scoreKeys struct {
	keys [MaxScoreKeys]uint64 // 0: empty
	next uint8                // the slot the next key takes
}

// has reports whether key is among k's (nil: none).
func (k *scoreKeys) has(key uint64) bool {
	if k == nil {
		return false
	}
	for _, x := range &k.keys {
		if x == key {
			return true
		}
	}
	return false
}

// add adds key to k, over the oldest.
func (k *scoreKeys) add(key uint64) {
	k.keys[k.next%MaxScoreKeys] = key
	k.next = (k.next + 1) % MaxScoreKeys
}
