package selfimprove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

var updateStateGolden = flag.Bool("update-state-golden", false, "rewrite testdata/state-*-as-v2.json from the format 1 files")

// stateGoldens are the format 1 files, as the loop wrote them before
// format 2, and their expected format 2 encodings.
var stateGoldens = []struct{ v1, v2, id string }{
	// A change under canary verification, a rolled-back change and its
	// rejected tweak, a pending proposal, four clusters, a manual
	// threshold, the critical mark, a cooldown.
	{"testdata/state-v1.json", "testdata/state-v1-as-v2.json", "support-bot/\xff1"},
	// An open circuit.
	{"testdata/state-v1-circuit.json", "testdata/state-v1-circuit-as-v2.json", "batch-job"},
}

// equalState compares in-memory states; a nil and an empty list or map
// are the same.
func equalState(t *testing.T, got, want agentState) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(agentState{})); diff != "" {
		t.Fatalf("state differs (-want +got):\n%s", diff)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestStateFormat1Golden(t *testing.T) {
	for _, g := range stateGoldens {
		t.Run(filepath.Base(g.v1), func(t *testing.T) {
			data := readTestdata(t, g.v1)
			got, err := decodeState(data, g.id)
			if err != nil {
				t.Fatal(err)
			}
			// The decoder of format 1 as it was: the in-memory layout read
			// as is, then checked.
			var old agentState
			if err := json.Unmarshal(data, &old); err != nil {
				t.Fatal(err)
			}
			// The one intended difference: the agent ID, in the state and
			// in its changes and proposals, is the exact one (format 1
			// carried it in agent_id_b64), not its readable copy.
			old.AgentID = g.id
			if err := old.check(g.id); err != nil {
				t.Fatal(err)
			}
			old.ownChanges(g.id)
			equalState(t, got, old)

			enc, err := encodeState(&old)
			if err != nil {
				t.Fatal(err)
			}
			if *updateStateGolden {
				if err := os.WriteFile(g.v2, enc, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := readTestdata(t, g.v2)
			if !bytes.Equal(enc, want) {
				t.Fatalf("format 2 encoding differs from %s:\n%s", g.v2, enc)
			}
			if enc2, _ := encodeState(&got); !bytes.Equal(enc2, want) {
				t.Fatalf("the new decoder's state encodes differently from %s", g.v2)
			}
			back, err := decodeState(want, g.id)
			if err != nil {
				t.Fatal(err)
			}
			equalState(t, back, old)
		})
	}
}

// TestStateFormat1GoldenHasEverything guards the golden files against
// losing what they are there to cover.
func TestStateFormat1GoldenHasEverything(t *testing.T) {
	a, err := decodeState(readTestdata(t, stateGoldens[0].v1), stateGoldens[0].id)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case a.Verifying == nil || a.Verify.Calls == 0 || a.Control.Calls == 0:
		t.Error("no change under canary verification")
	case len(a.Changes) != 1 || a.Changes[0].State != ChangeRolledBack || len(a.Rejected) != 1:
		t.Error("no rolled-back change")
	case len(a.Proposals) != 1 || len(a.Clusters) < 3 || a.Manual == nil || !a.Critical || a.CooldownUntil == 0:
		t.Error("no proposal, clusters, manual threshold, critical mark or cooldown")
	case a.Tracker.Total < 40 || a.Tracker.FailEnd[15] == 0 || a.Tracker.CallEnd[maxBeforeCalls-1] == 0:
		t.Error("the rings are not filled")
	}
	b, err := decodeState(readTestdata(t, stateGoldens[1].v1), stateGoldens[1].id)
	if err != nil {
		t.Fatal(err)
	}
	if b.CircuitOpenUntil == 0 {
		t.Error("no open circuit")
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestStateFormat1NextSaveIsFormat2(t *testing.T) {
	g := stateGoldens[0]
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agents", fileName(g.id))
	if err := os.WriteFile(path, readTestdata(t, g.v1), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC))
	l, err := New(WithDir(dir), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, _ := l.ExecuteWithImprovement(context.Background(), g.id, func(context.Context, Config) error { return nil })
	if rep.LoopErr != nil || rep.ConfigVersion != 3 {
		t.Fatalf("report = %+v", rep)
	}
	if got := l.Stats(g.id).TotalCalls; got != 50 {
		t.Fatalf("%d calls, want the file's 49 and this one", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data := readTestdata(t, path)
	if !bytes.HasPrefix(data, []byte(`{"format":2,`)) {
		t.Fatalf("saved as %.40s…, want format 2", data)
	}
	st, err := decodeState(data, g.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tracker.Total != 50 || st.Verify.Calls != 7 || st.Verifying == nil || len(st.Clusters) != 4 {
		t.Errorf("saved state lost something: total %d, verify %+v, %d clusters", st.Tracker.Total, st.Verify, len(st.Clusters))
	}
}

// roundTrip checks that st encodes, decodes to an equal state, and
// encodes again to the same bytes.
func roundTrip(t *testing.T, st *agentState) []byte {
	t.Helper()
	enc, err := encodeState(st)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	back, err := decodeState(enc, st.AgentID)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, enc)
	}
	equalState(t, back, *st)
	again, err := encodeState(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, again) {
		t.Fatalf("encode→decode→encode differs:\n%s\n%s", enc, again)
	}
	return enc
}

func TestStateRoundTripFresh(t *testing.T) {
	for _, id := range []string{"", "a", "\xff\xfe\x00", strings.Repeat("é", 300)} {
		st := newState(id, Config{Version: 1})
		roundTrip(t, &st)
	}
}

// TestStateRoundTripLive drives real loops through random calls, failures,
// changes, rollbacks, proposals and time jumps, and round-trips every
// agent's state along the way: the rings wrap, the windows resize, the
// clusters are replaced.
func TestStateRoundTripLive(t *testing.T) {
	texts := []string{
		"upstream: 503 service unavailable", "timeout after 30s", "rate limit exceeded (429)",
		"model \"gpt\" not found", "connection refused", "invalid JSON in reply", "context length exceeded",
		"tool search failed", "quota exhausted", "internal error 17", "bad gateway", "auth failed for key",
	}
	ids := []string{"a", "\xff\xfe agent", "high-volume"}
	seen := map[string]int{}
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 7))
		clk := fakeclock.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
		strat := StrategyFunc(func(_ context.Context, an Analysis) (*Tweak, error) {
			if r.IntN(4) == 0 {
				return nil, nil
			}
			c := an.Config
			c.Timeout = time.Duration(1+r.IntN(60)) * time.Second
			c.MaxAttempts = 1 + r.IntN(4)
			return &Tweak{Config: c, Reason: "try", Review: r.IntN(3) == 0, Rule: "a rule", Confidence: 0.5}, nil
		})
		policy := RollbackPolicy{Method: Method(seed), CanaryFraction: 0.3}
		l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(strat),
			WithRollbackPolicy(policy), WithCircuitBreaker(CircuitBreaker{Failures: 9, CoolOff: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetThreshold(ids[2], Threshold{Failures: 4, Window: 10 * time.Minute, Cooldown: time.Minute}); err != nil {
			t.Fatal(err)
		}
		for i := range 1500 {
			id := ids[r.IntN(len(ids))]
			failP := []float64{0.1, 0.5, 0.9}[(i/200)%3]
			text := texts[r.IntN(len(texts))]
			d := time.Duration(r.IntN(2000)) * time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			if r.IntN(50) == 0 {
				cancel() // the caller gives up: an ignored call
			}
			l.ExecuteWithImprovement(ctx, id, func(ctx context.Context, _ Config) error {
				clk.Advance(d)
				if err := ctx.Err(); err != nil {
					return err
				}
				if r.Float64() < failP {
					return errors.New(text)
				}
				return nil
			})
			cancel()
			switch k := r.IntN(100); {
			case k < 2:
				clk.Advance(time.Duration(r.IntN(72)) * time.Hour)
			case k < 30:
				clk.Advance(time.Duration(r.IntN(600)) * time.Second)
			}
			if i%50 == 49 {
				for _, id := range ids {
					st := l.liveState(id)
					roundTrip(t, &st)
					for what, ok := range map[string]bool{
						"verifying": st.Verifying != nil, "control arm": st.Control.Calls > 0,
						"decided changes": len(st.Changes) > 0, "rejected tweaks": len(st.Rejected) > 0,
						"proposals": len(st.Proposals) > 0, "open circuit": st.CircuitOpenUntil != 0,
						"cooldown": st.CooldownUntil != 0, "ignored calls": st.Tracker.Ignored > 0,
					} {
						if ok {
							seen[what]++
						}
					}
				}
			}
		}
		st := l.liveState(ids[2])
		if st.Tracker.Total < 400 || st.Tracker.FailEnd[failRing-1] == 0 || len(st.Clusters) != maxClusters {
			t.Errorf("seed %d: the rings did not fill: %d calls, %d clusters", seed, st.Tracker.Total, len(st.Clusters))
		}
		l.Close()
	}
	for _, what := range []string{"verifying", "control arm", "decided changes", "rejected tweaks", "proposals", "open circuit", "cooldown", "ignored calls"} {
		if seen[what] == 0 {
			t.Errorf("no state with %s was round-tripped", what)
		}
	}
}

// liveState returns a copy of agent id's state.
func (l *Loop) liveState(id string) agentState {
	a, _ := l.lockAgent(nil, id, 0)
	defer a.mu.Unlock()
	return a.s.snapshot()
}

func TestEncodeStateNegativeDurationsAreZero(t *testing.T) {
	st := newState("a", Config{Version: 1})
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	// A clock that stepped back makes negative durations.
	st.Tracker.record(0, now, -time.Second, true, 1, "x", 0)
	st.Verify.add(-time.Second, false)
	enc, err := encodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeState(enc, "a")
	if err != nil {
		t.Fatal(err)
	}
	tr := &back.Tracker
	if tr.CallDur[0] != 0 || tr.Recent[0].Dur != 0 || tr.Win.sumLatency() != 0 || back.Verify.Latency != 0 {
		t.Errorf("negative durations stored as %d, %d, %d, %d; want 0", tr.CallDur[0], tr.Recent[0].Dur, tr.Win.sumLatency(), back.Verify.Latency)
	}
}

// TestEncodeStateSavesOddButReachableStates covers states the loop can
// reach that a strict reading would refuse: they must save and load.
func TestEncodeStateSavesOddButReachableStates(t *testing.T) {
	st := newState("a", Config{Version: 1})
	// A strategy may suggest, for review, a config that cannot be applied.
	st.Proposals = []Proposal{{ID: "p", AgentID: "a", Config: &Config{MaxAttempts: 500}, Status: ProposalPending}}
	// A circuit breaker's cool-off may outlast the storable times.
	st.CircuitOpenUntil = math.MaxInt64
	enc, err := encodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeState(enc, "a")
	if err != nil {
		t.Fatal(err)
	}
	if back.CircuitOpenUntil != maxNanos-1 || back.Proposals[0].Config.MaxAttempts != 500 {
		t.Errorf("circuit open until %d, proposal %+v", back.CircuitOpenUntil, back.Proposals[0].Config)
	}
}

func (w *window) sumLatency() int64 {
	var n int64
	for _, s := range w.Slots {
		n += s.Latency
	}
	return n
}

func TestEncodeStateRefusesWhatItCannotRead(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	tests := []struct {
		name, want string
		edit       func(st *agentState)
	}{
		{"cooldown before 1970", "cooldown_until", func(st *agentState) { st.CooldownUntil = -1 }},
		{"failure before 1970", "calls.failures[0].end", func(st *agentState) {
			st.Tracker.record(0, -5, time.Second, true, 1, "x", 0)
		}},
		{"gap in the failure ring", "calls.failures", func(st *agentState) {
			st.Tracker.record(0, now, time.Second, true, 1, "x", 0)
			st.Tracker.record(0, now, time.Second, true, 1, "x", 0)
			st.Tracker.FailEnd[1], st.Tracker.Recent[1] = 0, failRecord{}
		}},
		{"generation too high", "generation", func(st *agentState) { st.Gen = maxCount }},
		{"failures above calls", "verify.failures", func(st *agentState) { st.Verify = counts{Calls: 1, Failures: 2} }},
		{"too many changes", "changes", func(st *agentState) { st.Changes = make([]Change, maxChanges+1) }},
		{"bigger than a state file", "bytes", func(st *agentState) { st.Config.Route = strings.Repeat("r", maxStateFile) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState("a", Config{Version: 1})
			tt.edit(&st)
			_, err := encodeState(&st)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("encodeState: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// setJSON returns the JSON document data with the value at path set to v;
// path is a field path as the decoder's errors name it, such as
// "calls.window.buckets[0].calls".
func setJSON(t *testing.T, data []byte, path string, v any) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var steps []any
	for _, part := range strings.Split(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		steps = append(steps, name)
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			if err != nil {
				t.Fatalf("path %q: %v", path, err)
			}
			steps = append(steps, n)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	cur := doc
	for i, s := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			k := s.(string)
			if last {
				c[k] = v
			} else if cur = c[k]; cur == nil {
				t.Fatalf("path %q: no %q", path, k)
			}
		case []any:
			n := s.(int)
			if n >= len(c) {
				t.Fatalf("path %q: no element %d", path, n)
			}
			if last {
				c[n] = v
			} else {
				cur = c[n]
			}
		default:
			t.Fatalf("path %q: %v is not a container", path, cur)
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// extremes are the integers no counter, time or duration may hold.
var extremes = []int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, 1 << 62, -1}

// timeExtremes are times no stored time may be: the ends of int64
// nanoseconds, 2^62 ns after 1970, just before 1970, and the ends of
// RFC 3339.
var timeExtremes = []string{
	"2262-04-11T23:47:16.854775807Z", "1677-09-21T00:12:43.145224192Z", "2116-02-20T23:53:38.427387904Z",
	"1969-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z",
}

// checkRejected decodes data and checks that it is refused with an error
// that contains want, or one of its alternatives separated by "|".
func checkRejected(t *testing.T, data []byte, id, want string) {
	t.Helper()
	_, err := decodeState(data, id)
	if err == nil {
		t.Fatalf("accepted")
	}
	for _, w := range strings.Split(want, "|") {
		if strings.Contains(err.Error(), w) {
			return
		}
	}
	t.Fatalf("error %q does not name %q", err, want)
}

func TestDecodeStateRangeChecksFormat2(t *testing.T) {
	a, b := stateGoldens[0], stateGoldens[1]
	docA, docB := readTestdata(t, a.v2), readTestdata(t, b.v2)
	ints := []string{
		"max_version", "generation", "config.version", "config.max_attempts", "history[0].version",
		"verify.calls", "verify.failures", "verify.latency_ns", "verify.consecutive_failures",
		"control.calls", "control.failures", "control.latency_ns", "control.consecutive_failures",
		"verifying.from.version", "verifying.to.version", "verifying.before.calls", "verifying.window.total_calls",
		"changes[0].from.version", "changes[0].to.version", "changes[0].before.calls", "changes[0].before.failures",
		"changes[0].before.total_latency_ns", "changes[0].before.avg_latency_ns", "changes[0].before.consecutive_failures",
		"changes[0].window.window_ns", "changes[0].window.calls_per_day", "changes[0].window.total_calls",
		"changes[0].window.ignored", "changes[0].control.calls",
		"threshold.failures", "threshold.window", "threshold.cooldown", "rejected[0].config.version",
		"calls.total", "calls.ignored", "calls.consecutive_failures",
		"calls.window.bucket_ns", "calls.window.buckets[0].calls", "calls.window.buckets[0].failures",
		"calls.window.buckets[0].latency_ns", "calls.last_24h.bucket_ns", "calls.last_24h.buckets[0].calls",
		"calls.failures[0].generation", "calls.failures[0].duration_ns", "calls.failures[0].version",
		"calls.failures[15].duration_ns", "calls.latest[0].duration_ns", "calls.latest[15].duration_ns",
		"calls.ring_pos.failures", "calls.ring_pos.failure_details", "calls.ring_pos.latest",
		"clusters[0].total", "clusters[0].window.bucket_ns", "clusters[0].window.buckets[0].failures",
		"proposals[0].count", "proposals[0].config.version",
	}
	for _, field := range ints {
		for _, v := range extremes {
			if v == -1 && strings.HasSuffix(field, "generation") && strings.HasPrefix(field, "calls.") {
				v = 1 << 32 // a kept failure's generation is its low 32 bits
			}
			t.Run(fmt.Sprintf("%s=%d", field, v), func(t *testing.T) {
				want := field
				switch {
				case strings.HasPrefix(field, "threshold."):
					// The threshold's own check names the field.
					want = "threshold: selfimprove: invalid threshold: " + strings.TrimPrefix(field, "threshold.")
				case field == "config.max_attempts":
					want = "config: selfimprove: invalid config: max attempts|config: selfimprove: invalid config: negative max attempts"
				}
				checkRejected(t, setJSON(t, docA, field, json.Number(strconv.FormatInt(v, 10))), a.id, want)
			})
		}
	}
	times := []string{
		"cooldown_until", "calls.window.newest", "calls.window.buckets[0].start", "calls.last_24h.newest",
		"calls.last_24h.buckets[3].start", "calls.failures[0].end", "calls.failures[15].end", "calls.latest[0].end",
		"clusters[0].first_seen", "clusters[0].last_seen", "clusters[0].window.newest",
		"clusters[0].window.buckets[1].start", "verifying.applied_at", "changes[0].applied_at",
		"changes[0].decided_at", "proposals[0].created", "proposals[0].updated",
	}
	for _, field := range times {
		for _, v := range timeExtremes {
			t.Run(field+"="+v, func(t *testing.T) {
				checkRejected(t, setJSON(t, docA, field, v), a.id, field)
			})
		}
	}
	for _, v := range timeExtremes {
		t.Run("circuit_open_until="+v, func(t *testing.T) {
			checkRejected(t, setJSON(t, docB, "circuit_open_until", v), b.id, "circuit_open_until")
		})
	}
}

func TestDecodeStateRangeChecksFormat1(t *testing.T) {
	a, b := stateGoldens[0], stateGoldens[1]
	docA, docB := readTestdata(t, a.v1), readTestdata(t, b.v1)
	// Each format 1 field, and the name the error gives it: its own for
	// the fields read as they were, its format 2 name for those read into
	// a list.
	fields := []struct{ v1, want string }{
		{"max_version", "max_version"},
		{"generation", "generation"},
		{"cooldown_until_ns", "cooldown_until"},
		{"config.version", "config.version"},
		{"history[0].version", "history[0].version"},
		{"verify.calls", "verify.calls"},
		{"verify.failures", "verify.failures"},
		{"verify.latency_ns", "verify.latency_ns"},
		{"verify.consecutive", "verify.consecutive"},
		{"control.latency_ns", "control.latency_ns"},
		{"changes[0].after.calls", "changes[0].after.calls"},
		{"rejected[0].config.version", "rejected[0].config.version"},
		{"tracker.window.width_ns", "calls.window"},
		{"tracker.window.head", "calls.window.newest"},
		{"tracker.window.slots[3].c", "tracker.window.slots.c"},
		{"tracker.window.slots[3].f", "tracker.window.slots.f"},
		{"tracker.window.slots[3].l", "calls.window.buckets["},
		{"tracker.day.head", "calls.last_24h.newest"},
		{"tracker.day.slots[7]", "tracker.day.slots"},
		{"tracker.fail_end[3]", "calls.failures[3].end"},
		{"tracker.fail_gen[3]", "tracker.fail_gen"},
		{"tracker.recent[3].e", "calls.failures["},
		{"tracker.recent[3].d", "calls.failures[3].duration_ns"},
		{"tracker.recent[3].v", "tracker.recent.v|calls.failures[3].version"},
		{"tracker.recent[3].cl", "tracker.recent.cl"},
		{"tracker.call_end[3]", "calls.latest["},
		{"tracker.call_dur[3]", "calls.latest[2].duration_ns"},
		{"tracker.call_fail", "tracker.call_fail"},
		{"tracker.call_pos", "tracker.call_pos"},
		{"tracker.fail_pos", "tracker.fail_pos"},
		{"tracker.recent_pos", "tracker.recent_pos"},
		{"tracker.consecutive", "calls.consecutive_failures"},
		{"tracker.total", "calls.total"},
		{"tracker.ignored", "calls.ignored"},
		{"clusters[0].total", "clusters[0].total"},
		{"clusters[0].first", "clusters[0].first_seen"},
		{"clusters[0].last", "clusters[0].last_seen"},
		{"clusters[0].width_ns", "clusters[0].window"},
		{"clusters[0].head", "clusters[0].window.newest"},
		{"clusters[0].slots[2]", "clusters.slots"},
		{"proposals[0].count", "proposals[0].count"},
	}
	for _, f := range fields {
		for _, v := range extremes {
			t.Run(fmt.Sprintf("%s=%d", f.v1, v), func(t *testing.T) {
				checkRejected(t, setJSON(t, docA, f.v1, json.Number(strconv.FormatInt(v, 10))), a.id, f.want)
			})
		}
	}
	for _, v := range extremes {
		t.Run(fmt.Sprintf("circuit_open_until_ns=%d", v), func(t *testing.T) {
			checkRejected(t, setJSON(t, docB, "circuit_open_until_ns", json.Number(strconv.FormatInt(v, 10))), b.id, "circuit_open_until")
		})
	}
}

func TestDecodeStateRejects(t *testing.T) {
	a := stateGoldens[0]
	doc, v1 := readTestdata(t, a.v2), readTestdata(t, a.v1)
	set := func(path string, v any) []byte { return setJSON(t, doc, path, v) }
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	var parsed map[string]any
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	calls := parsed["calls"].(map[string]any)
	failures := calls["failures"].([]any)
	cluster := parsed["clusters"].([]any)[0]
	tests := []struct {
		name string
		data []byte
		id   string
		want string
	}{
		{"no format", []byte(`{"agent_id_b64":"YQ=="}`), "a", "unknown format 0"},
		{"format 3", set("format", 3), a.id, "unknown format 3"},
		{"format as a string", set("format", "2"), a.id, "format"},
		{"not JSON", []byte("{\"format\":2,"), a.id, "unexpected end"},
		{"another agent", doc, "someone else", "another agent ID"},
		{"bad base64", set("agent_id_b64", "!!"), a.id, "agent_id_b64"},
		{"version above max_version", set("max_version", 2), a.id, "config.version: 3 out of range [1, 3)"},
		{"verifying another config", set("verifying.to.version", 2), a.id, "not the current config"},
		{"invalid config", set("config.timeout", "-1s"), a.id, "config: selfimprove: invalid config"},
		{"too many history entries", set("history", many(maxHistory+1, map[string]any{"version": 1})), a.id, "history: 17 configs, at most 16"},
		{"too many changes", set("changes", many(maxChanges+1, parsed["changes"].([]any)[0])), a.id, "changes: 17"},
		{"too many rejected", set("rejected", many(maxRejected+1, parsed["rejected"].([]any)[0])), a.id, "rejected: 33"},
		{"too many clusters", set("clusters", many(maxClusters+1, cluster)), a.id, "clusters: 9"},
		{"too many proposals", set("proposals", many(maxProposals+1, parsed["proposals"].([]any)[0])), a.id, "proposals: 17"},
		{"too many failures", set("calls.failures", many(failRing+1, failures[0])), a.id, "calls.failures: 65 failures"},
		{"too many failure details", set("calls.failures", many(recentRing+1, failures[0])), a.id, "17 failures with details"},
		{"too many latest calls", set("calls.latest", many(maxBeforeCalls+1, calls["latest"].([]any)[0])), a.id, "calls.latest: 17"},
		{"a failure without details after one with", set("calls.failures[5]", map[string]any{"end": "2026-03-01T14:27:07Z", "generation": 1}), a.id, "calls.failures[5]: no details"},
		{"a detailed failure without version", set("calls.failures[5]", map[string]any{"end": "2026-03-01T14:27:07Z", "duration_ns": 1}), a.id, "calls.failures[5].version: missing"},
		{"a failure at 1970", set("calls.failures[0].end", "1970-01-01T00:00:00Z"), a.id, "calls.failures[0].end"},
		{"a call at 1970", set("calls.latest[0].end", "1970-01-01T00:00:00Z"), a.id, "calls.latest[0].end"},
		{"a bad cluster ID", set("calls.failures[0].cluster", "xyz"), a.id, "calls.failures[0].cluster"},
		{"a cluster ID not hex", set("clusters[0].id", "zzzzzzzzzzzzzzzz"), a.id, "clusters[0].id"},
		{"bucket off its boundary", set("calls.window.buckets[0].start", "2026-03-01T12:00:01Z"), a.id, "not on a bucket boundary"},
		{"bucket outside the window", set("calls.window.buckets[0].start", "2026-02-01T00:00:00Z"), a.id, "outside the window"},
		{"buckets out of order", set("calls.window.buckets[1].start", "2026-03-01T12:00:00Z"), a.id, "not after the previous bucket"},
		{"newest off its boundary", set("calls.window.newest", "2026-03-01T17:26:16Z"), a.id, "calls.window.newest"},
		{"failures above calls in a bucket", set("calls.window.buckets[0].failures", 2), a.id, "calls.window.buckets[0].failures"},
		{"window latency sum too big", set("calls.window.buckets[1].latency_ns", json.Number(strconv.FormatInt(maxNanos-50_000_000, 10))), a.id, "calls.window.buckets[1].latency_ns"},
		{"day bucket of another width", set("calls.last_24h.bucket_ns", int64(60_000_000_000)), a.id, "calls.last_24h.bucket_ns"},
		{"day bucket over 65535", set("calls.last_24h.buckets[0].calls", 65536), a.id, "calls.last_24h.buckets[0].calls"},
		{"cluster first seen after last", set("clusters[0].first_seen", "2026-03-01T18:00:00Z"), a.id, "clusters[0].first_seen: after last_seen"},
		{"failure version above max", set("calls.failures[0].version", 4), a.id, "calls.failures[0].version"},
		{"consecutive above failures", set("verify.consecutive_failures", 5), a.id, "verify.consecutive_failures"},
		{"proposal confidence above 1", set("proposals[0].confidence", 2), a.id, "proposals[0].confidence"},
		{"success rate above 1", set("changes[0].window.success_rate", 2), a.id, "changes[0].window.success_rate"},
		{"threshold out of range", set("threshold.window", "9000h"), a.id, "threshold"},
		{"format 1: gap in the failure ring", setJSON(t, setJSON(t, v1, "tracker.fail_end[5]", 0), "tracker.fail_gen[5]", 0), a.id, "an empty slot between events"},
		{"format 1: details of another failure", setJSON(t, v1, "tracker.recent[5].e", 1), a.id, "details are those of another failure"},
		{"format 1: ring position beyond the ring", setJSON(t, v1, "tracker.call_pos", 16), a.id, "ring position 16"},
		{"format 1: a bucket before 1970", setJSON(t, setJSON(t, v1, "tracker.window.head", 3), "tracker.window.slots[60].c", 1), a.id, "before 1970"},
		{"format 1: another agent", v1, "b", "another agent ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRejected(t, tt.data, tt.id, tt.want)
		})
	}
}

// TestDecodeStateErrorsNameFormat1 checks that an error in a format 1
// file says so.
func TestDecodeStateErrorsNameFormat1(t *testing.T) {
	a := stateGoldens[0]
	_, err := decodeState(setJSON(t, readTestdata(t, a.v1), "tracker.total", -1), a.id)
	if err == nil || !regexp.MustCompile(`^format 1: calls\.total: -1 out of range`).MatchString(err.Error()) {
		t.Fatalf("error = %v", err)
	}
}

func BenchmarkEncodeState(b *testing.B) {
	g := stateGoldens[0]
	data, err := os.ReadFile(g.v2)
	if err != nil {
		b.Fatal(err)
	}
	st, err := decodeState(data, g.id)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeState(&st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeState(b *testing.B) {
	for _, g := range stateGoldens[:1] {
		for _, name := range []string{g.v1, g.v2} {
			data, err := os.ReadFile(name)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(filepath.Base(name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := decodeState(data, g.id); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestFormatDocExample checks that the example file of docs/format.md is
// exactly what the loop writes for the state it describes.
func TestFormatDocExample(t *testing.T) {
	doc := string(readTestdata(t, "docs/format.md"))
	_, rest, ok := strings.Cut(doc, "### Example")
	if !ok {
		t.Fatal("docs/format.md has no example")
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the example is not closed")
	}
	st, err := decodeState([]byte(example), "support-bot")
	if err != nil {
		t.Fatalf("the example does not decode: %v", err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(example)); err != nil {
		t.Fatal(err)
	}
	want.WriteByte('\n')
	if got := roundTrip(t, &st); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the loop writes the example's state as\n%s\nnot as the example:\n%s", got, want.Bytes())
	}
}
