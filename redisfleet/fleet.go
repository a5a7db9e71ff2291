// Package redisfleet is a selfimprove.Fleet on Redis: the replicas of a
// service share each agent's config, decisions and learning through one
// Redis deployment (standalone, Sentinel or Cluster, through
// redis.UniversalClient).
//
// Every key starts with Options.Prefix. An agent's keys are
// <prefix>{<32 hex digits of SHA-256(agent ID)>}:<part>, so that they share
// one hash slot and no agent ID can reach outside its own keys; the agent
// ID itself is stored inside the state hash. Per agent, Redis holds:
//
//	:s  hash   rev, val (the shared state, at most MaxValue bytes), id
//	:n  hash   the pooled counts of the generation in flight, and of all
//	           generations; expires after Options.CountsTTL without calls
//	:f  list   the latest selfimprove.MaxFleetFailures failures (their text
//	           at most 200 bytes); expires with :n
//	:l  string the strategy lease, with its expiry
//	:b  hash   each replica's latest batch of counts booked; expires with :n
//	:t  hash   val (the statistics sent last, at most MaxStats bytes), id;
//	           expires with :n
//	:s-bad, :n-bad, :f-bad, :t-bad  a key set aside because it held what no
//	           replica writes; expires after a day
//
// and, for the whole prefix, the stream <prefix>events (capped at about
// Options.MaxEvents entries with XADD MAXLEN ~), the hash <prefix>notes
// (the fleet's notes: dead routes and account-wide causes, at most
// selfimprove.MaxFleetNotes) and the pub/sub channel <prefix>changes. Decisions and pooled counts are Lua scripts, run with
// EVALSHA (EVAL when the server does not have them), each on one agent's
// keys. Nothing else is written: no key outside the prefix, no FLUSH, no
// CONFIG.
package redisfleet

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
)

// Options configure a Fleet. The zero value takes every default.
type Options struct {
	// Prefix starts every key and the channel. Default "selfimprove:".
	Prefix string
	// MaxEvents caps the event stream, approximately (XADD MAXLEN ~).
	// Default 10,000.
	MaxEvents int64
	// CountsTTL is how long an agent's pooled counts and failures live
	// after its last call. Default 24 hours.
	CountsTTL time.Duration
}

// MaxValue is the largest shared state the Fleet stores or reads, in
// bytes (the largest agent state file).
const MaxValue = 4 << 20

// maxEventBytes bounds one event read from the stream.
const maxEventBytes = 256 << 10

// Fleet is a selfimprove.Fleet on Redis. It is safe for concurrent use.
type Fleet struct {
	c    redis.UniversalClient
	opts Options

	mu     sync.Mutex
	subs   map[int]func(string, uint64)
	nextID int
	ps     *redis.PubSub
	done   chan struct{}
	closed bool

	clock srvClock
}

var _ si.Fleet = (*Fleet)(nil)

// New returns a Fleet on client. The client stays the caller's: Close
// does not close it. New checks the Redis user's rights (Check, for up
// to a second) and returns its error when a right is missing; a Redis
// that cannot be reached yet is not an error. Any client settings do:
// every operation returns by its deadline (see docs/fleet.md for the
// settings that free the connection then too).
func New(client redis.UniversalClient, opts Options) (*Fleet, error) {
	if client == nil {
		return nil, errors.New("redisfleet: nil client")
	}
	if opts.Prefix == "" {
		opts.Prefix = "selfimprove:"
	}
	if opts.MaxEvents == 0 {
		opts.MaxEvents = 10_000
	}
	if opts.CountsTTL == 0 {
		opts.CountsTTL = 24 * time.Hour
	}
	switch {
	case opts.MaxEvents < 0:
		return nil, fmt.Errorf("redisfleet: MaxEvents %d is negative", opts.MaxEvents)
	case opts.CountsTTL < time.Second:
		return nil, fmt.Errorf("redisfleet: CountsTTL %v is less than a second", opts.CountsTTL)
	}
	f := &Fleet{c: client, opts: opts, subs: map[int]func(string, uint64){}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.Check(ctx); err != nil && !errors.Is(err, si.ErrFleetUnavailable) {
		return nil, err
	}
	return f, nil
}

// Close stops the subscription. It does not close the client.
func (f *Fleet) Close() error {
	f.mu.Lock()
	ps, done := f.ps, f.done
	f.closed, f.ps = true, nil
	f.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}

// keys returns agentID's key prefix: <prefix>{<hex>}:.
func (f *Fleet) keys(agentID string) string {
	h := sha256.Sum256([]byte(agentID))
	return f.opts.Prefix + "{" + hex.EncodeToString(h[:16]) + "}:"
}

func (f *Fleet) channel() string { return f.opts.Prefix + "changes" }

// Lease gives agentID's lease to owner for ttl.
func (f *Fleet) Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error) {
	var n int64
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = leaseScript.Run(ctx, f.c, []string{f.keys(agentID) + "l"}, owner, max(ttl.Milliseconds(), 1)).Int64()
		return err
	})
	if err != nil {
		return false, fail("lease", err)
	}
	return n == 1, nil
}

// Release ends owner's lease of agentID.
func (f *Fleet) Release(ctx context.Context, agentID, owner string) error {
	err := f.do(ctx, func(ctx context.Context) error {
		return releaseScript.Run(ctx, f.c, []string{f.keys(agentID) + "l"}, owner).Err()
	})
	if err != nil {
		return fail("release", err)
	}
	return nil
}

// Subscribe calls fn after each commit, from the subscription's
// goroutine. The subscription starts with the first Subscribe and
// reconnects by itself; messages sent while it is down are lost (the
// Loop polls too).
func (f *Fleet) Subscribe(fn func(agentID string, rev uint64)) (stop func()) {
	f.mu.Lock()
	id := f.nextID
	f.nextID++
	f.subs[id] = fn
	if f.ps == nil && !f.closed {
		f.ps = f.c.Subscribe(context.Background(), f.channel())
		f.done = make(chan struct{})
		go f.listen(f.ps, f.done)
	}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
	}
}

func (f *Fleet) listen(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	for m := range ps.Channel() {
		revS, id, ok := strings.Cut(m.Payload, ":")
		if !ok || len(id) > si.MaxAgentIDLen {
			continue
		}
		rev, err := strconv.ParseUint(revS, 10, 64)
		if err != nil || rev >= maxRev {
			continue
		}
		f.mu.Lock()
		fns := make([]func(string, uint64), 0, len(f.subs))
		for _, fn := range f.subs {
			fns = append(fns, fn)
		}
		f.mu.Unlock()
		for _, fn := range fns {
			fn(id, rev)
		}
	}
}

// eventLine is an entry of the stream <prefix>events: a line of the event
// log (events.jsonl, docs/format.md), so that an agent ID that is not
// UTF-8, which JSON shows with U+FFFD, also travels exactly, in
// agent_id_b64. An event of a UTF-8 agent ID has no agent_id_b64, as
// entries always had.
type eventLine struct {
	si.Event
	AgentIDB64 string `json:"agent_id_b64,omitempty"`
}

// AppendEvents adds events to the stream <prefix>events.
func (f *Fleet) AppendEvents(ctx context.Context, events []si.Event) error {
	pipe := f.c.Pipeline()
	for _, e := range events {
		l := eventLine{Event: e}
		if !utf8.ValidString(e.AgentID) {
			l.AgentIDB64 = base64.StdEncoding.EncodeToString([]byte(e.AgentID))
		}
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("redisfleet: append events: %w", err)
		}
		if len(b) > maxEventBytes {
			continue
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.opts.Prefix + "events", MaxLen: f.opts.MaxEvents, Approx: true, Values: []any{"e", b}})
	}
	if err := f.do(ctx, func(ctx context.Context) error { _, err := pipe.Exec(ctx); return err }); err != nil {
		return fail("append events", err)
	}
	return nil
}

// Events returns up to limit of the latest events, oldest first.
func (f *Fleet) Events(ctx context.Context, limit int) ([]si.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	var msgs []string
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		msgs, err = eventsScript.Run(ctx, f.c, []string{f.opts.Prefix + "events"}, limit, maxEventBytes).StringSlice()
		return err
	})
	if err != nil {
		return nil, fail("events", err)
	}
	// The entries, oldest first, as the lines of an event log: ReadEvents
	// takes each agent's exact ID from agent_id_b64 and skips the entries
	// that are not an event (an entry holding a newline, which
	// AppendEvents never writes, is one).
	var log strings.Builder
	for i := len(msgs) - 1; i >= 0; i-- {
		if s := msgs[i]; len(s) <= maxEventBytes && !strings.Contains(s, "\n") {
			log.WriteString(s)
			log.WriteByte('\n')
		}
	}
	out := make([]si.Event, 0, len(msgs))
	_, err = si.ReadEvents(strings.NewReader(log.String()), func(e si.Event) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisfleet: events: %w", err)
	}
	return out, nil
}
