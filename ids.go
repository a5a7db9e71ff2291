package selfimprove

// This file makes the IDs the loop hands out: UUIDv7s for changes,
// events and proposals, and the call IDs a late score names a call by.

import (
	crand "crypto/rand"
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
// (about a millisecond; they wrap after 52 days), then a check byte: a
// shift and a multiplication on the success path.
const (
	idVersionBits = 24
	idTimeBits    = 32
	idTimeShift   = 20
	idCheckKey    = 0x9e3779b97f4a7c15
	// scoreSkew is how far in the future a call ID may end: the clocks of
	// the loops that share a state directory may differ by this much.
	scoreSkew = time.Minute
)

// callID is the ID of a call that ended at endN (Unix ns) under version.
func callID(endN int64, version int) uint64 {
	low := uint64(version)&(1<<idVersionBits-1) | (uint64(endN)>>idTimeShift)<<idVersionBits&(1<<56-1)
	return low | idCheck(low)
}

// parseCallID returns the low bits of the version of the call id names and
// how long ago, before now, it ended. It refuses an ID whose check byte is
// wrong, or that ended in the future or more than ScoreHorizon ago.
func parseCallID(id uint64, now time.Time) (version uint64, age time.Duration, err error) {
	low := id & (1<<56 - 1)
	if id == 0 || id&^(1<<56-1) != idCheck(low) {
		return 0, 0, fmt.Errorf("%w: ID %016x is not a call's", ErrUnknownCall, id)
	}
	units := low >> idVersionBits
	ago := int64(int32(uint32(uint64(now.UnixNano())>>idTimeShift) - uint32(units)))
	age = time.Duration(ago << idTimeShift)
	switch {
	case age < -scoreSkew:
		return 0, 0, fmt.Errorf("%w: ID %016x ends %v in the future", ErrUnknownCall, id, -age)
	case age > ScoreHorizon:
		return 0, 0, fmt.Errorf("%w: the call ended %v ago, more than %v", ErrScoreTooLate, age.Round(time.Second), ScoreHorizon)
	}
	return low & (1<<idVersionBits - 1), max(age, 0), nil
}

// idCheck is the check byte of an ID's low 56 bits, in place.
func idCheck(low uint64) uint64 { return (low*idCheckKey + idCheckKey) >> 56 << 56 }
