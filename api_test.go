package selfimprove_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

func TestNilFunc(t *testing.T) {
	e := newEnv(t)
	rep, err := e.l.ExecuteWithImprovement(context.Background(), "a", nil)
	if !errors.Is(err, si.ErrNilFunc) || !errors.Is(rep.Err, si.ErrNilFunc) || !errors.Is(rep.LoopErr, si.ErrNilFunc) {
		t.Fatalf("nil fn: %v, %+v", err, rep)
	}
	_, _, err = si.Execute[int](context.Background(), e.l, "a", nil)
	if !errors.Is(err, si.ErrNilFunc) {
		t.Fatalf("Execute with nil fn: %v", err)
	}
	if m := e.l.Metrics(); m.Agents != 0 || len(e.l.Proposals(nil)) != 0 || e.l.Stats("a").Calls != 0 {
		t.Fatalf("a nil fn was recorded: %+v", m)
	}
}

// panicsHere is the frame a panic's trace must still show.
func panicsHere(context.Context, si.Config) error { panic("kaboom") }

func TestPanicReraisedOnItsOwnFrames(t *testing.T) {
	e := newEnv(t)
	var stack string
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the fn's own panic value", r)
			}
			stack = string(debug.Stack())
		}()
		e.l.ExecuteWithImprovement(context.Background(), "a", panicsHere)
	}()
	if !strings.Contains(stack, "panicsHere") {
		t.Fatalf("the trace lost the panicking frame:\n%s", stack)
	}
	if s := e.l.Stats("a"); s.Failures != 1 {
		t.Fatalf("the panic was not recorded as a failure: %+v", s)
	}
	if cs := e.l.Clusters("a"); len(cs) != 1 || cs[0].Class != failure.ClassPanic {
		t.Fatalf("clusters = %+v", cs)
	}
}

func TestGettersCreateNothing(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"typo1", "typo2", "t\x00y"} {
		e.l.Config(id)
		e.l.Stats(id)
		e.l.Threshold(id)
		e.l.Changes(id)
		e.l.Health(id)
		e.l.Clusters(id)
		e.l.History(id)
	}
	if m := e.l.Metrics(); m.Agents != 0 || m.Loads != 0 {
		t.Fatalf("getters created agents: %+v", m)
	}
	if ids := slices.Collect(e.l.Agents()); len(ids) != 0 {
		t.Fatalf("Agents() = %q", ids)
	}
	e.call("real", nil, 0)
	if err := e.l.SetConfig("real", si.Config{Route: "backup"}); err != nil {
		t.Fatal(err)
	}
	e.l.Close()
	files, _ := os.ReadDir(filepath.Join(e.dir, "agents"))
	if len(files) != 1 {
		t.Fatalf("agent files = %d, want 1", len(files))
	}
	// After a restart, the agent is listed and read from the store
	// without being loaded.
	e.open()
	if ids := slices.Collect(e.l.Agents()); !slices.Equal(ids, []string{"real"}) {
		t.Fatalf("Agents() after restart = %q", ids)
	}
	if c := e.l.Config("real"); c.Route != "backup" || c.Version != 2 {
		t.Fatalf("Config from the store = %+v", c)
	}
	if h := e.l.History("real"); len(h) != 2 || h[0].Version != 1 || h[1].Version != 2 {
		t.Fatalf("History = %+v", h)
	}
	if m := e.l.Metrics(); m.Agents != 0 {
		t.Fatalf("a getter kept the agent loaded: %+v", m)
	}
	// Agents covers both places, each agent once.
	e.call("other", nil, 0)
	e.call("real", nil, 0)
	ids := slices.Sorted(e.l.Agents())
	if !slices.Equal(ids, []string{"other", "real"}) {
		t.Fatalf("Agents() = %q", ids)
	}
}

func TestAgentsRAMStore(t *testing.T) {
	st := si.NewRAMStore()
	l, err := si.New(si.WithStore(st), si.WithLogger(quiet), si.WithNotifier(nil), si.WithMaxAgents(2))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{"a", "b", "c", "d"} {
		if err := l.SetConfig(id, si.Config{Route: id}); err != nil {
			t.Fatal(err)
		}
	}
	if ids := slices.Sorted(l.Agents()); !slices.Equal(ids, []string{"a", "b", "c", "d"}) {
		t.Fatalf("Agents() = %q", ids)
	}
}

func TestOptionsValidated(t *testing.T) {
	tests := []struct {
		name string
		opt  si.Option
	}{
		{"WithStrategyTimeout", si.WithStrategyTimeout(-1)},
		{"WithStrategyTimeout", si.WithStrategyTimeout(0)},
		{"WithFlushInterval", si.WithFlushInterval(-1)},
		{"WithMaxAgents", si.WithMaxAgents(0)},
		{"WithTraceQueue", si.WithTraceQueue(0, time.Second)},
		{"WithTraceQueue", si.WithTraceQueue(10, -time.Second)},
		{"WithTraces", si.WithTraces(si.TraceMode(99))},
		{"WithMemory", si.WithMemory(si.MemoryOptions{MaxClusters: -1})},
		{"WithMemory", si.WithMemory(si.MemoryOptions{HalfLife: -time.Hour})},
		{"WithCircuitBreaker", si.WithCircuitBreaker(si.CircuitBreaker{Failures: -1})},
		{"WithCircuitBreaker", si.WithCircuitBreaker(si.CircuitBreaker{Failures: 65})},
		{"WithCircuitBreaker", si.WithCircuitBreaker(si.CircuitBreaker{CoolOff: -time.Second})},
		{"WithDailySummary", si.WithDailySummary(25 * time.Hour)},
		{"WithNotifyOptions", si.WithNotifyOptions(si.NotifyOptions{Queue: -1})},
		{"WithNotifyOptions", si.WithNotifyOptions(si.NotifyOptions{Timeout: -time.Second})},
		{"WithRollbackPolicy", si.WithRollbackPolicy(si.RollbackPolicy{Method: si.Method(9)})},
		{"WithRollbackPolicy", si.WithRollbackPolicy(si.RollbackPolicy{BeforeCalls: 17})},
		{"WithRollbackPolicy", si.WithRollbackPolicy(si.RollbackPolicy{FalseRollbacks: 1.5})},
		{"WithRollbackPolicy", si.WithRollbackPolicy(si.RollbackPolicy{CanaryFraction: 0.9})},
		{"WithDefaultConfig", si.WithDefaultConfig(si.Config{MaxAttempts: -1})},
		{"WithNotifier", si.WithNotifier(validated{errors.New("insecure URL")})},
		{"WithNotifier", si.WithNotifier(validated{}, nil, &validated{errors.New("token required")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), tt.opt)
			if err == nil {
				l.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), tt.name) {
				t.Fatalf("error %q does not wrap ErrInvalidOption naming %s", err, tt.name)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "123:abc") {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
	// Zero values take the defaults; documented special values stay.
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithFlushInterval(0),
		si.WithCircuitBreaker(si.CircuitBreaker{}), si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: -1}),
		si.WithNotifier(validated{}))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestAgentIDBounded(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", si.MaxAgentIDLen+1)
	ran := false
	rep, err := e.l.ExecuteWithImprovement(context.Background(), long, func(context.Context, si.Config) error {
		ran = true
		return errBoom
	})
	if !ran || err != errBoom || !errors.Is(rep.LoopErr, si.ErrInvalidAgentID) {
		t.Fatalf("long ID: ran %v, err %v, %+v", ran, err, rep)
	}
	huge := strings.Repeat("z", 3<<20) // 3 MiB
	if rep, _ := e.l.ExecuteWithImprovement(context.Background(), huge, func(context.Context, si.Config) error { return nil }); !rep.Success || !errors.Is(rep.LoopErr, si.ErrInvalidAgentID) {
		t.Fatalf("3 MiB ID: %+v", rep)
	}
	if err := e.l.SetConfig(huge, si.Config{Route: "r"}); !errors.Is(err, si.ErrInvalidAgentID) {
		t.Fatalf("SetConfig with a 3 MiB ID: %v", err)
	}
	if err := e.l.SetConfig(long, si.Config{}); !errors.Is(err, si.ErrInvalidAgentID) {
		t.Fatalf("SetConfig: %v", err)
	}
	if err := e.l.SetThreshold(long, si.Threshold{}); !errors.Is(err, si.ErrInvalidAgentID) {
		t.Fatalf("SetThreshold: %v", err)
	}
	if m := e.l.Metrics(); m.Agents != 0 {
		t.Fatalf("a long ID was tracked: %+v", m)
	}
	// The longest accepted ID is tracked, saved and loaded again.
	max := strings.Repeat("y", si.MaxAgentIDLen)
	if err := e.l.SetConfig(max, si.Config{Route: "r"}); err != nil {
		t.Fatal(err)
	}
	e.l.Close()
	e.open()
	if c := e.l.Config(max); c.Route != "r" {
		t.Fatalf("config of the longest ID after restart: %+v", c)
	}
}

// TestCloseIsABarrier: calls in flight when Close begins write nothing
// after Close returns, even when a second Loop has taken the directory.
func TestCloseIsABarrier(t *testing.T) {
	const agents = 9
	dir := t.TempDir()
	clk := fakeclock.New(t0)
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		c := a.Config
		c.Route = "tweaked"
		return &si.Tweak{Config: c, Reason: "try another route"}, nil
	})
	open := func() *si.Loop {
		l, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithLogger(quiet), si.WithNotifier(nil), si.WithStrategy(strat),
			si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1})) // the first failure triggers
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := open()
	ctx := context.Background()
	ids := verifyingAgents(t, a, agents)
	// The deciding calls are in flight when Close begins.
	release := make(chan struct{})
	var started, done sync.WaitGroup
	reps := make([]si.Report, agents)
	for i := range ids {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			reps[i], _ = a.ExecuteWithImprovement(ctx, ids[i], func(context.Context, si.Config) error {
				started.Done()
				<-release
				return errBoom
			})
		}()
	}
	started.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// Another Loop takes the directory and sets every agent's config.
	b := open()
	for _, id := range ids {
		if err := b.SetConfig(id, si.Config{Route: "operator"}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	done.Wait()
	for i, rep := range reps {
		if rep.Rollback != nil && !errors.Is(rep.LoopErr, si.ErrClosed) {
			t.Errorf("%s: a rollback after Close was reported as saved: %+v", ids[i], rep)
		}
	}
	if err := a.SetConfig(ids[0], si.Config{Route: "late"}); !errors.Is(err, si.ErrClosed) {
		t.Fatalf("SetConfig after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c := open()
	defer c.Close()
	for _, id := range ids {
		if cfg := c.Config(id); cfg.Route != "operator" {
			t.Errorf("%s: the second Loop's config was overwritten: %+v", id, cfg)
		}
	}
}

// verifyingAgents returns n agents of l, each with a change under
// verification that its next failure will roll back.
func verifyingAgents(t *testing.T, l *si.Loop, n int) []string {
	t.Helper()
	ctx := context.Background()
	fail := func(context.Context, si.Config) error { return errBoom }
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "agent-" + string(rune('a'+i))
		if err := l.SetThreshold(ids[i], si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		// One failure applies v3 (the threshold set v1 → still v1; the
		// tweak is v2), then 4 more failures under it: the 5th will
		// roll it back.
		for range 5 {
			l.ExecuteWithImprovement(ctx, ids[i], fail)
		}
		if c := l.Config(ids[i]); c.Route != "tweaked" {
			t.Fatalf("%s: no change under verification: %+v", ids[i], c)
		}
	}
	return ids
}
