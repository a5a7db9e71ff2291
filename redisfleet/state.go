package redisfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
)

// errBad says that an agent's keys hold what the fleet never writes.
var errBad = errors.New("redisfleet: invalid value in Redis")

// Load returns agentID's shared state and revision. A state that is not
// valid (a key of another type, a value over MaxValue, a revision out of
// range, another agent's) is not downloaded: Load returns revision 0 and
// an error that does not wrap si.ErrFleetUnavailable, and a Commit on
// revision 0 replaces it.
func (f *Fleet) Load(ctx context.Context, agentID string) (uint64, []byte, error) {
	var res []any
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = loadScript.Run(ctx, f.c, []string{f.keys(agentID) + "s"}, agentID, MaxValue).Slice()
		return err
	})
	if err != nil {
		return 0, nil, fail("load", err)
	}
	head, _ := res[0].(string)
	switch {
	case head == "0":
		return 0, nil, nil
	case head == "bad" || len(res) != 2:
		why := fmt.Sprint(res[len(res)-1])
		return 0, nil, fmt.Errorf("redisfleet: load: agent %q: %w: %s; the next commit sets it aside", agentID, errBad, why)
	}
	rev, err := strconv.ParseUint(head, 10, 64)
	s, _ := res[1].(string)
	if err != nil || rev == 0 || rev >= maxRev || len(s) > MaxValue {
		return 0, nil, fmt.Errorf("redisfleet: load: agent %q: %w: revision %.20q", agentID, errBad, head)
	}
	return rev, []byte(s), nil
}

// Commit stores value if agentID's revision is still rev. When ctx has a
// deadline, the commit lands only if Redis runs it early enough for its
// answer to arrive by the deadline (see docs/fleet.md, "No ghost
// commits"): a Commit that returns an error for its deadline has not
// landed, and will not.
func (f *Fleet) Commit(ctx context.Context, agentID string, rev uint64, value []byte) (uint64, error) {
	if len(value) > MaxValue {
		return 0, fmt.Errorf("redisfleet: commit: %d bytes, more than %d", len(value), MaxValue)
	}
	if rev >= maxRev {
		return 0, fmt.Errorf("redisfleet: commit: revision %d out of range", rev)
	}
	var dl int64
	if d, ok := ctx.Deadline(); ok {
		var fresh bool
		if dl, fresh = f.clock.deadline(d, time.Now()); !fresh {
			if err := f.serverTime(ctx); err != nil {
				return 0, err
			}
			dl, _ = f.clock.deadline(d, time.Now())
		}
	}
	k := f.keys(agentID)
	var n int64
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = commitScript.Run(ctx, f.c, []string{k + "s", k + "s-bad"}, rev, value, agentID, f.channel(), dl, MaxValue).Int64()
		return err
	})
	switch {
	case err != nil:
		return 0, fail("commit", err)
	case n == 0:
		return 0, fmt.Errorf("redisfleet: commit: %w: Redis ran it too late, and wrote nothing", si.ErrFleetUnavailable)
	case n < 0:
		return 0, fmt.Errorf("redisfleet: agent %q is at revision %d, not %d: %w", agentID, -n-1, rev, si.ErrFleetConflict)
	}
	return uint64(n), nil
}

// Add adds the deltas, in one pipeline, and returns the pooled counts. A
// delta with a Batch number is booked once, however often it is sent. An
// agent whose keys hold invalid values gets its pool with Err set (the
// values are set aside); the other agents' counts are not affected.
func (f *Fleet) Add(ctx context.Context, deltas []si.FleetDelta) ([]si.FleetPool, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	for _, d := range deltas {
		if err := checkDelta(&d); err != nil {
			return nil, err
		}
	}
	cmds := make([]*redis.Cmd, len(deltas))
	// run sends the deltas of cmds[i] for each i in only (all when nil),
	// by EVALSHA, or by EVAL.
	run := func(ctx context.Context, only []int, eval bool) error {
		pipe := f.c.Pipeline()
		for i := range deltas {
			if only != nil && !slices.Contains(only, i) {
				continue
			}
			keys, args := f.addArgs(&deltas[i])
			if eval {
				cmds[i] = addScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = addScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := f.do(ctx, func(ctx context.Context) error {
		err := run(ctx, nil, false)
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Sent again by EVAL: only the deltas whose node lacked the
			// script (a Redis Cluster loads it node by node); the others
			// were booked.
			var again []int
			for i, c := range cmds {
				if c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
					again = append(again, i)
				}
			}
			err = run(ctx, again, true)
		}
		if err != nil && !unreachable(err) {
			err = nil // one agent's error: its pool says so
		}
		return err
	})
	if err != nil {
		return nil, fail("add", err)
	}
	at := time.Now()
	out := make([]si.FleetPool, len(deltas))
	for i, cmd := range cmds {
		var p si.FleetPool
		if err := cmd.Err(); err != nil {
			p.Err = fmt.Errorf("redisfleet: add: agent %q: %w", deltas[i].AgentID, err)
		} else {
			p = f.parsePool(cmd.Val(), at)
			if p.Err != nil {
				p.Err = fmt.Errorf("redisfleet: add: agent %q: %w", deltas[i].AgentID, p.Err)
			}
		}
		p.Gen = deltas[i].Gen
		out[i] = p
	}
	return out, nil
}

// MaxStats is the most bytes of an agent's statistics (FleetDelta.Stats)
// a Fleet stores, and reads: larger ones are not sent, and a larger
// value found in Redis is set aside unread.
const MaxStats = 256 << 10

// LoadStats returns the statistics of agentID's delta booked last (nil
// when none). A value that is not valid statistics of the agent (another
// type, over MaxStats, another agent's) is set aside unread, and
// reported by an error that does not wrap ErrFleetUnavailable.
func (f *Fleet) LoadStats(ctx context.Context, agentID string) ([]byte, error) {
	var res []any
	err := f.do(ctx, func(ctx context.Context) error {
		k := f.keys(agentID)
		var err error
		res, err = statsScript.Run(ctx, f.c, []string{k + "t", k + "t-bad"}, agentID, MaxStats).Slice()
		return err
	})
	if err != nil {
		return nil, fail("load stats", err)
	}
	var head, last any
	if len(res) > 0 {
		head, last = res[0], res[len(res)-1]
	}
	switch {
	case head == "0":
		return nil, nil
	case head == "1" && len(res) == 2:
		if v, ok := last.(string); ok && len(v) <= MaxStats {
			return []byte(v), nil
		}
	}
	return nil, fmt.Errorf("redisfleet: load stats: agent %q: %w: %.200s", agentID, errBad, fmt.Sprint(last))
}

// checkDelta refuses a delta the scripts could not book: negative counts,
// a generation out of range, a replica name over 64 bytes.
func checkDelta(d *si.FleetDelta) error {
	ok := d.Gen < maxRev && len(d.Replica) <= 64 && len(d.AgentID) <= maxAgentID
	for _, c := range []si.FleetCounts{d.Change, d.Control} {
		ok = ok && c.Calls >= 0 && c.Failures >= 0 && c.Failures <= c.Calls && c.LatencyNS >= 0 &&
			c.SuccessLatencyNS >= 0 && c.SuccessLatencyNS <= c.LatencyNS && c.Consecutive >= 0 && c.Consecutive <= c.Calls &&
			sumsOK(c)
	}
	if !ok {
		return fmt.Errorf("redisfleet: add: invalid delta of agent %q: %+v %+v", d.AgentID, d.Change, d.Control)
	}
	return nil
}

// maxSum bounds the float sums of counts (the scripts refuse larger).
const maxSum = 1e300

// sumsOK reports whether c's scores and costs are in range: counts from 0
// to 4e18, the scores' sum at most their count and their squares' at
// most their sum (with room for rounding), successes with a cost at most
// the calls with one, the cost a number from 0 to maxSum.
func sumsOK(c si.FleetCounts) bool {
	const most = 4e18
	return c.Scored >= 0 && c.Scored <= most && c.Costed >= 0 && c.Costed <= most && c.CostOK >= 0 && c.CostOK <= c.Costed &&
		c.ScoreSum >= 0 && c.ScoreSum <= float64(c.Scored)*(1+1e-9)+1e-9 &&
		c.ScoreSquares >= 0 && c.ScoreSquares <= c.ScoreSum*(1+1e-9)+1e-9 && c.Cost >= 0 && c.Cost <= maxSum
}

// addArgs returns addScript's keys and arguments for d.
func (f *Fleet) addArgs(d *si.FleetDelta) ([]string, []any) {
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
	args = append(args, si.MaxFleetFailures, d.Replica, d.Batch, MaxValue)
	for _, c := range []si.FleetCounts{d.Change, d.Control} {
		args = append(args, c.Scored, c.ScoreSum, c.ScoreSquares, c.Costed, c.CostOK, c.Cost)
	}
	var stats []byte
	if len(d.Stats) <= MaxStats {
		stats = d.Stats
	}
	args = append(args, stats, d.AgentID)
	return []string{k + "n", k + "f", k + "s", k + "b", k + "n-bad", k + "f-bad", k + "t"}, args
}

// cut cuts s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// parsePool reads addScript's answer, received at at. What it cannot
// take it leaves out, and says so in the pool's Err.
func (f *Fleet) parsePool(v any, at time.Time) si.FleetPool {
	var p si.FleetPool
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		p.Err = fmt.Errorf("%w: an answer of %T", errBad, v)
		return p
	}
	if us, ok := timeOf(a[4]); ok {
		f.clock.saw(us, at)
	}
	var bad []string
	if aside, _ := a[5].(string); aside != "" {
		bad = append(bad, "set aside: "+strings.TrimSpace(aside))
	}
	revS, _ := a[0].(string)
	if rev, err := strconv.ParseUint(revS, 10, 64); err == nil && rev < maxRev {
		p.Rev = rev
	} else {
		bad = append(bad, "the state is invalid")
	}
	same, _ := a[1].(int64)
	vals, _ := a[2].([]any)
	if len(vals) != 33 {
		vals = make([]any, 33)
	}
	num := func(i int) int64 {
		s, _ := vals[i].(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	sum := func(i int) float64 {
		s, _ := vals[i].(string)
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || !(x >= 0 && x <= maxSum) {
			return 0
		}
		return x
	}
	counts := func(i int) si.FleetCounts {
		c := si.FleetCounts{Calls: num(i), Failures: num(i + 1), LatencyNS: num(i + 2), SuccessLatencyNS: num(i + 3), Consecutive: num(i + 4),
			Scored: num(i + 5), ScoreSum: sum(i + 6), ScoreSquares: sum(i + 7), Costed: num(i + 8), CostOK: num(i + 9), Cost: sum(i + 10)}
		if !sumsOK(c) {
			c.Scored, c.ScoreSum, c.ScoreSquares, c.Costed, c.CostOK, c.Cost = 0, 0, 0, 0, 0, 0
			bad = append(bad, "invalid scores or costs left out")
		}
		return c
	}
	if same == 1 {
		p.Change, p.Control = counts(0), counts(11)
	}
	p.Total = counts(22)
	list, _ := a[3].([]any)
	skipped := 0
	for _, e := range list[max(0, len(list)-si.MaxFleetFailures):] {
		if x, ok := failureOf(e); ok {
			p.Failures = append(p.Failures, x)
		} else {
			skipped++
		}
	}
	if skipped > 0 {
		bad = append(bad, fmt.Sprintf("%d invalid failure entries left out", skipped))
	}
	if len(bad) > 0 {
		p.Err = fmt.Errorf("%w: %s", errBad, strings.Join(bad, "; "))
	}
	return p
}

// failureOf reads one failure entry, "<seq> <json>", and checks it.
func failureOf(e any) (si.FleetFailure, bool) {
	var x si.FleetFailure
	s, _ := e.(string)
	seqS, js, ok := strings.Cut(s, " ")
	if !ok || len(js) > 4096 {
		return x, false
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if dec.Decode(&x) != nil {
		return x, false
	}
	seq, err := strconv.ParseUint(seqS, 10, 64)
	if err != nil || seq == 0 || x.Seq != 0 || x.Gen >= maxRev || x.EndNS < 0 || x.DurationNS < 0 || x.Version < 0 ||
		len(x.Text) > 200 || len(x.Replica) > 64 || len(x.Class) > 64 {
		return x, false
	}
	x.Seq = seq
	return x, true
}
