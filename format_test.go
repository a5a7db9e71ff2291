package selfimprove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
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
// are the same. What is not persisted (unexported) is left out.
func equalState(t *testing.T, got, want agentState) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(agentState{}, streak{}, routeState{})); diff != "" {
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
		l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithLogger(quietLog), WithNotifier(nil), WithStrategy(strat), WithRetryPolicy(RetryPolicy{TransientAttempts: 1}),
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
				roundTripAgents(t, l, ids, seen)
			}
		}
		st := l.liveState(ids[2])
		if st.Tracker.Total < 350 || st.Tracker.FailEnd[failRing-1] == 0 || len(st.Clusters) != maxClusters {
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

// roundTripAgents round-trips the state of every agent in ids of l, and
// counts in seen the kinds of state that were round-tripped.
func roundTripAgents(t *testing.T, l *Loop, ids []string, seen map[string]int) {
	t.Helper()
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
