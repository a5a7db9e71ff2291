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
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

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
}

var _ si.Fleet = (*Fleet)(nil)

// New returns a Fleet on client. The client stays the caller's: Close
// does not close it.
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
	return &Fleet{c: client, opts: opts, subs: map[int]func(string, uint64){}}, nil
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

// wrap marks a Redis error as the fleet being unavailable.
func wrap(op string, err error) error {
	return fmt.Errorf("redisfleet: %s: %w: %w", op, si.ErrFleetUnavailable, err)
}

// Load returns agentID's shared state and revision.
func (f *Fleet) Load(ctx context.Context, agentID string) (uint64, []byte, error) {
	k := f.keys(agentID)
	vals, err := f.c.HMGet(ctx, k+"s", "rev", "id", "len").Result()
	if err != nil {
		return 0, nil, wrap("load", err)
	}
	if vals[0] == nil {
		return 0, nil, nil
	}
	rev, err := strconv.ParseUint(fmt.Sprint(vals[0]), 10, 64)
	if err != nil || fmt.Sprint(vals[1]) != agentID {
		return 0, nil, fmt.Errorf("redisfleet: load: the state of agent %q is not its own", agentID)
	}
	if n, err := strconv.Atoi(fmt.Sprint(vals[2])); err != nil || n > MaxValue {
		return 0, nil, fmt.Errorf("redisfleet: load: the state of agent %q is larger than %d bytes", agentID, MaxValue)
	}
	// Read with the revision it belongs to, in one script-free step:
	// HMGET again and compare.
	vv, err := f.c.HMGet(ctx, k+"s", "rev", "val").Result()
	if err != nil {
		return 0, nil, wrap("load", err)
	}
	if fmt.Sprint(vv[0]) != fmt.Sprint(vals[0]) {
		return f.Load(ctx, agentID) // committed in between: again
	}
	s, _ := vv[1].(string)
	if len(s) > MaxValue {
		return 0, nil, fmt.Errorf("redisfleet: load: the state of agent %q is larger than %d bytes", agentID, MaxValue)
	}
	return rev, []byte(s), nil
}

// commitScript is Commit. An agent's first revision is the server's time
// in microseconds, so that after Redis lost its data (a restart without
// persistence) a new state never takes a revision a replica already
// knows for an older one. Revisions stay below 2^53, exact in Lua.
var commitScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'rev') or '0')
if cur ~= tonumber(ARGV[1]) then return -cur - 1 end
if cur == 0 then
  local t = redis.call('TIME')
  cur = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  cur = cur + 1
end
local s = string.format('%.0f', cur)
redis.call('HSET', KEYS[1], 'rev', s, 'val', ARGV[2], 'id', ARGV[3], 'len', string.len(ARGV[2]))
redis.call('PUBLISH', ARGV[4], s .. ':' .. ARGV[3])
return cur
`)

// Commit stores value if agentID's revision is still rev.
func (f *Fleet) Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error) {
	if len(value) > MaxValue {
		return 0, fmt.Errorf("redisfleet: commit: %d bytes, more than %d", len(value), MaxValue)
	}
	n, err := commitScript.Run(ctx, f.c, []string{f.keys(agentID) + "s"}, rev, value, agentID, f.channel()).Int64()
	if err != nil {
		return 0, wrap("commit", err)
	}
	if n < 0 {
		return 0, fmt.Errorf("redisfleet: agent %q is at revision %d, not %d: %w", agentID, -n-1, rev, si.ErrFleetConflict)
	}
	return uint64(n), nil
}

// addScript adds one delta: KEYS n, f, s; ARGV gen, change (5), control
// (5), ttl ms, failure count, failures.
var addScript = redis.NewScript(`
local n = KEYS[1]
local gen = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', n, 'gen') or '0')
local function add(p, b)
  local calls, fails = tonumber(ARGV[b]), tonumber(ARGV[b+1])
  redis.call('HINCRBY', n, p..'c', calls)
  redis.call('HINCRBY', n, p..'f', fails)
  redis.call('HINCRBY', n, p..'l', ARGV[b+2])
  redis.call('HINCRBY', n, p..'o', ARGV[b+3])
  if calls > fails then
    redis.call('HSET', n, p..'k', ARGV[b+4])
  else
    redis.call('HINCRBY', n, p..'k', fails)
  end
end
if gen > cur then
  redis.call('HDEL', n, 'cc', 'cf', 'cl', 'co', 'ck', 'kc', 'kf', 'kl', 'ko', 'kk')
  redis.call('HSET', n, 'gen', gen)
  cur = gen
end
add('t', 2)
add('t', 7)
if gen == cur then
  add('c', 2)
  add('k', 7)
end
local nf = tonumber(ARGV[13])
for i = 1, nf do
  local seq = redis.call('HINCRBY', n, 'seq', 1)
  redis.call('RPUSH', KEYS[2], seq .. ' ' .. ARGV[13 + i])
end
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[14 + nf]), -1)
redis.call('PEXPIRE', n, ARGV[12])
redis.call('PEXPIRE', KEYS[2], ARGV[12])
local same = 0
if gen == cur then same = 1 end
return {redis.call('HGET', KEYS[3], 'rev') or '0', same,
  redis.call('HMGET', n, 'cc', 'cf', 'cl', 'co', 'ck', 'kc', 'kf', 'kl', 'ko', 'kk', 'tc', 'tf', 'tl', 'to', 'tk'),
  redis.call('LRANGE', KEYS[2], 0, -1)}
`)

// Add adds the deltas, in one pipeline, and returns the pooled counts.
func (f *Fleet) Add(ctx context.Context, deltas []si.FleetDelta) ([]si.FleetPool, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	run := func(eval bool) ([]*redis.Cmd, error) {
		pipe := f.c.Pipeline()
		cmds := make([]*redis.Cmd, len(deltas))
		for i, d := range deltas {
			k := f.keys(d.AgentID)
			args := []any{d.Gen}
			for _, c := range []si.FleetCounts{d.Change, d.Control} {
				args = append(args, c.Calls, c.Failures, c.LatencyNS, c.SuccessLatencyNS, c.Consecutive)
			}
			fails := d.Failures[:min(len(d.Failures), si.MaxFleetFailures)]
			args = append(args, f.opts.CountsTTL.Milliseconds(), len(fails))
			for _, x := range fails {
				x.Replica, x.Seq = d.Replica, 0
				if len(x.Text) > 200 {
					x.Text = cut(x.Text, 200)
				}
				b, _ := json.Marshal(x)
				args = append(args, b)
			}
			args = append(args, si.MaxFleetFailures)
			keys := []string{k + "n", k + "f", k + "s"}
			if eval {
				cmds[i] = addScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = addScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = run(true)
	}
	if err != nil {
		return nil, wrap("add", err)
	}
	out := make([]si.FleetPool, len(deltas))
	for i, cmd := range cmds {
		p, err := parsePool(cmd.Val())
		if err != nil {
			return nil, fmt.Errorf("redisfleet: add: %w", err)
		}
		p.Gen = deltas[i].Gen
		out[i] = p
	}
	return out, nil
}

// cut cuts s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// parsePool reads addScript's answer.
func parsePool(v any) (si.FleetPool, error) {
	var p si.FleetPool
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return p, fmt.Errorf("unexpected answer %T", v)
	}
	rev, err := strconv.ParseUint(fmt.Sprint(a[0]), 10, 64)
	if err != nil {
		return p, err
	}
	p.Rev = rev
	same, _ := a[1].(int64)
	vals, _ := a[2].([]any)
	if len(vals) != 15 {
		return p, errors.New("unexpected counts")
	}
	num := func(i int) int64 {
		s, _ := vals[i].(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	counts := func(i int) si.FleetCounts {
		return si.FleetCounts{Calls: num(i), Failures: num(i + 1), LatencyNS: num(i + 2), SuccessLatencyNS: num(i + 3), Consecutive: num(i + 4)}
	}
	if same == 1 {
		p.Change, p.Control = counts(0), counts(5)
	}
	p.Total = counts(10)
	list, _ := a[3].([]any)
	for _, e := range list[max(0, len(list)-si.MaxFleetFailures):] {
		s, _ := e.(string)
		seqS, js, ok := strings.Cut(s, " ")
		if !ok || len(js) > 4096 {
			continue
		}
		var x si.FleetFailure
		if json.Unmarshal([]byte(js), &x) != nil {
			continue
		}
		x.Seq, _ = strconv.ParseUint(seqS, 10, 64)
		p.Failures = append(p.Failures, x)
	}
	return p, nil
}

var leaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

// Lease gives agentID's lease to owner for ttl.
func (f *Fleet) Lease(ctx context.Context, agentID, owner string, ttl time.Duration) (bool, error) {
	n, err := leaseScript.Run(ctx, f.c, []string{f.keys(agentID) + "l"}, owner, max(ttl.Milliseconds(), 1)).Int64()
	if err != nil {
		return false, wrap("lease", err)
	}
	return n == 1, nil
}

// Release ends owner's lease of agentID.
func (f *Fleet) Release(ctx context.Context, agentID, owner string) error {
	if err := releaseScript.Run(ctx, f.c, []string{f.keys(agentID) + "l"}, owner).Err(); err != nil {
		return wrap("release", err)
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
		if err != nil {
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

// AppendEvents adds events to the stream <prefix>events.
func (f *Fleet) AppendEvents(ctx context.Context, events []si.Event) error {
	pipe := f.c.Pipeline()
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("redisfleet: append events: %w", err)
		}
		if len(b) > maxEventBytes {
			continue
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.opts.Prefix + "events", MaxLen: f.opts.MaxEvents, Approx: true, Values: []any{"e", b}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap("append events", err)
	}
	return nil
}

// Events returns up to limit of the latest events, oldest first.
func (f *Fleet) Events(ctx context.Context, limit int) ([]si.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	msgs, err := f.c.XRevRangeN(ctx, f.opts.Prefix+"events", "+", "-", int64(limit)).Result()
	if err != nil {
		return nil, wrap("events", err)
	}
	out := make([]si.Event, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		s, _ := msgs[i].Values["e"].(string)
		if len(s) > maxEventBytes {
			continue
		}
		var e si.Event
		if json.Unmarshal([]byte(s), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}
