package selfimprove_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

const day = 24 * time.Hour

// params returns n parameters whose names are k0, k1, … and whose values
// are v, each padded with x to the given sizes.
func params(n, nameLen, valueLen int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		k := "k" + strconv.Itoa(i)
		m[k+strings.Repeat("x", max(nameLen-len(k), 0))] = strings.Repeat("v", valueLen)
	}
	return m
}

// badConfigs has one row per field of Config and bound: each config is
// refused, and the error names field.
var badConfigs = []struct {
	name  string
	cfg   si.Config
	field string
}{
	{"negative timeout", si.Config{Timeout: -time.Second}, "config.timeout"},
	{"timeout over 24h", si.Config{Timeout: day + 1}, "config.timeout"},
	{"negative max attempts", si.Config{MaxAttempts: -1}, "config.max_attempts"},
	{"max attempts over 100", si.Config{MaxAttempts: 101}, "config.max_attempts"},
	{"negative backoff", si.Config{Backoff: -1}, "config.backoff"},
	{"backoff over 1h", si.Config{Backoff: 100 * time.Hour}, "config.backoff: 100h0m0s, more than 1h"},
	{"route over 256 bytes", si.Config{Route: strings.Repeat("r", 257)}, "config.route: 257 bytes"},
	{"route of 1 MiB", si.Config{Route: strings.Repeat("r", 1<<20)}, "config.route: 1048576 bytes"},
	{"route not UTF-8", si.Config{Route: "gpt\xff"}, "config.route"},
	{"17 params", si.Config{Params: params(17, 2, 1)}, "config.params: 17 entries"},
	{"param name over 64 bytes", si.Config{Params: params(1, 65, 1)}, `config.params["k0xx`},
	{"param value over 256 bytes", si.Config{Params: params(1, 2, 257)}, `config.params["k0"]: 257 bytes`},
	{"param name not UTF-8", si.Config{Params: map[string]string{"k\xff": "v"}}, `config.params["k\xff"] name`},
	{"param value not UTF-8", si.Config{Params: map[string]string{"k": "\xff"}}, `config.params["k"]: "\xff" is not valid UTF-8`},
	{"params over 2,048 bytes in all", si.Config{Params: params(10, 10, 200)}, "config.params: 2100 bytes"},
}

// goodConfigs are at the bounds: accepted, and read back as they were.
var goodConfigs = []si.Config{
	{Timeout: day, MaxAttempts: 100, Backoff: time.Hour, Route: strings.Repeat("é", 128)},
	{Params: params(16, 64, 64)}, // 16 × 128 = 2,048 bytes
	{Params: params(1, 64, 256), Route: "\x00<&>\u2028"},
}

func TestSetConfigBounds(t *testing.T) {
	e := newEnv(t)
	for _, c := range badConfigs {
		t.Run(c.name, func(t *testing.T) {
			err := e.l.SetConfig("a", c.cfg)
			if !errors.Is(err, si.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("SetConfig = %v, want ErrInvalidConfig naming %s", err, c.field)
			}
		})
	}
	if v := e.l.Config("a").Version; v != 1 {
		t.Fatalf("a refused config was installed: version %d", v)
	}
	for i, cfg := range goodConfigs {
		id := "good" + strconv.Itoa(i)
		if err := e.l.SetConfig(id, cfg); err != nil {
			t.Fatalf("SetConfig(%+v) = %v", cfg, err)
		}
	}
	// Each reads back from its state file as it was.
	e.l.Close()
	e.open()
	for i, cfg := range goodConfigs {
		if got := e.l.Config("good" + strconv.Itoa(i)); !got.Equal(cfg) || got.Version != 2 {
			t.Errorf("config %d read back as %+v, want %+v at version 2", i, got, cfg)
		}
	}
}

// TestSetConfigVersion: SetConfig takes the version 0 and the current
// one (a config read, edited, set), and refuses any other.
func TestSetConfigVersion(t *testing.T) {
	e := newEnv(t)
	cfg := e.l.Config("a") // version 1, a new agent's
	cfg.Route = "edited"
	if err := e.l.SetConfig("a", cfg); err != nil {
		t.Fatalf("SetConfig of the config read = %v", err)
	}
	for _, v := range []int{1, 3, 99, -1} {
		err := e.l.SetConfig("a", si.Config{Version: v})
		if !errors.Is(err, si.ErrInvalidConfig) || !strings.Contains(err.Error(), "config.version: "+strconv.Itoa(v)) {
			t.Errorf("SetConfig with version %d (current 2) = %v, want ErrInvalidConfig naming config.version", v, err)
		}
	}
	if err := e.l.SetConfig("a", si.Config{Version: 2, Route: "again"}); err != nil {
		t.Fatal(err)
	}
	if got := e.l.Config("a"); got.Version != 3 || got.Route != "again" {
		t.Fatalf("config = %+v, want version 3", got)
	}
}

func TestDefaultConfigBounds(t *testing.T) {
	rows := append(badConfigs[:len(badConfigs):len(badConfigs)], struct {
		name  string
		cfg   si.Config
		field string
	}{"version 2", si.Config{Version: 2}, "config.version: 2"})
	for _, c := range rows {
		t.Run(c.name, func(t *testing.T) {
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithDefaultConfig(c.cfg))
			if err == nil {
				l.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, si.ErrInvalidOption) || !errors.Is(err, si.ErrInvalidConfig) ||
				!strings.Contains(err.Error(), "WithDefaultConfig") || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("New = %v, want ErrInvalidOption and ErrInvalidConfig naming WithDefaultConfig and %s", err, c.field)
			}
		})
	}
	for _, v := range []int{0, 1} {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithDefaultConfig(si.Config{Version: v, Route: "r"}))
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		l.Close()
	}
}

// tweakLoop returns a Loop whose strategy answers tw to the first
// failure of agent "a".
func tweakLoop(t *testing.T, tw si.Tweak) (*si.Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(t0)
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		if tw.Cluster == "" && len(a.Clusters) > 0 {
			tw.Cluster = a.Clusters[0].ID
		}
		return &tw, nil
	})
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithLogger(quiet), si.WithNotifier(nil),
		si.WithStrategy(strat), si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// failOnce makes a failing call of "a" and returns its Report.
func failOnce(l *si.Loop) si.Report {
	rep, _ := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return errBoom })
	return rep
}

// TestTweakBounds: a strategy's tweak outside the bounds is neither
// applied nor filed for review, and the error names the field.
func TestTweakBounds(t *testing.T) {
	for _, review := range []bool{false, true} {
		for _, c := range badConfigs {
			t.Run(c.name+"/review="+strconv.FormatBool(review), func(t *testing.T) {
				l, _ := tweakLoop(t, si.Tweak{Config: c.cfg, Review: review, Reason: "bad"})
				rep := failOnce(l)
				if !errors.Is(rep.LoopErr, si.ErrTweakRejected) || !errors.Is(rep.LoopErr, si.ErrInvalidConfig) ||
					!strings.Contains(rep.LoopErr.Error(), c.field) {
					t.Fatalf("LoopErr = %v, want ErrTweakRejected and ErrInvalidConfig naming %s", rep.LoopErr, c.field)
				}
				if rep.Improvement != nil || l.Config("a").Version != 1 || len(l.Proposals(nil)) != 0 || l.Metrics().RejectedTweaks != 1 {
					t.Fatalf("the tweak was taken: %+v, %d proposals, metrics %+v", rep.Improvement, len(l.Proposals(nil)), l.Metrics())
				}
			})
		}
	}
	for _, cluster := range []string{"c1", strings.Repeat("F", 16), strings.Repeat("x", 1<<20)} {
		l, _ := tweakLoop(t, si.Tweak{Config: si.Config{Route: "b"}, Cluster: cluster})
		if rep := failOnce(l); !errors.Is(rep.LoopErr, si.ErrTweakRejected) || !strings.Contains(rep.LoopErr.Error(), "tweak.cluster") ||
			len(rep.LoopErr.Error()) > 400 {
			t.Errorf("a tweak for cluster %.20q: LoopErr %v, want ErrTweakRejected naming tweak.cluster", cluster, rep.LoopErr)
		}
	}
}

// TestApproveBounds: a proposal's config, only a suggestion on disk, is
// checked when it is approved.
func TestApproveBounds(t *testing.T) {
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		return &si.Tweak{Config: si.Config{Route: "b"}, Review: true, Cluster: a.Clusters[0].ID}, nil
	})
	e := newEnv(t, si.WithStrategy(strat))
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.call("a", errBoom, time.Second)
	ps := e.l.Proposals(nil)
	if len(ps) != 1 || ps[0].Config == nil {
		t.Fatalf("proposals = %+v, want one with a config", ps)
	}
	e.l.Close()
	// A tool (or an older loop) wrote a suggestion beyond the bounds.
	files := agentFiles(t, e.dir)
	path := filepath.Join(e.dir, "agents", files[0])
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc = bytes.Replace(doc, []byte(`"route":"b"`), []byte(`"route":"`+strings.Repeat("b", 300)+`"`), 1)
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(si.WithStrategy(strat))
	err = e.l.Approve(ps[0].ID)
	if !errors.Is(err, si.ErrTweakRejected) || !errors.Is(err, si.ErrInvalidConfig) || !strings.Contains(err.Error(), "config.route: 300 bytes") {
		t.Fatalf("Approve = %v, want ErrTweakRejected and ErrInvalidConfig naming config.route", err)
	}
	if v := e.l.Config("a").Version; v != 1 {
		t.Fatalf("the proposal was applied: version %d", v)
	}
}

// TestBuiltinSuggestsWithinBounds: the builtin strategy suggests nothing
// beyond the bounds.
func TestBuiltinSuggestsWithinBounds(t *testing.T) {
	// At MaxAttempts 100, the built-in strategy's next step is beyond
	// the bound: its proposal carries its rule only.
	e := newEnv(t, si.WithStrategy(&si.BuiltinStrategy{MaxAttempts: 100}))
	if err := e.l.SetConfig("a", si.Config{MaxAttempts: 100}); err != nil {
		t.Fatal(err)
	}
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.call("a", errors.New("503 service unavailable"), time.Second)
	}
	ps := e.l.Proposals(nil)
	if len(ps) != 1 || ps[0].Config != nil || ps[0].Rule == "" {
		t.Fatalf("proposals = %+v, want one with a rule and no config", ps)
	}
}

// optionRows has one row per option field and bound: New refuses each,
// naming the option and the field.
var optionRows = []struct {
	option, field string
	opt           si.Option
}{
	{"WithRollbackPolicy", "Method", si.WithRollbackPolicy(si.RollbackPolicy{Method: si.Method(9)})},
	{"WithRollbackPolicy", "MinCalls", si.WithRollbackPolicy(si.RollbackPolicy{MinCalls: -1})},
	{"WithRollbackPolicy", "MinCalls", si.WithRollbackPolicy(si.RollbackPolicy{MinCalls: 1_000_001})},
	{"WithRollbackPolicy", "BeforeCalls", si.WithRollbackPolicy(si.RollbackPolicy{BeforeCalls: -1})},
	{"WithRollbackPolicy", "BeforeCalls", si.WithRollbackPolicy(si.RollbackPolicy{BeforeCalls: 17})},
	{"WithRollbackPolicy", "MinBeforeCalls", si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: 17})},
	{"WithRollbackPolicy", "MaxSuccessDrop: 500, more than 100", si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: 500})},
	{"WithRollbackPolicy", "MaxSuccessDrop", si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: 100.5})},
	{"WithRollbackPolicy", "MaxLatencyRise", si.WithRollbackPolicy(si.RollbackPolicy{MaxLatencyRise: 10_001})},
	{"WithRollbackPolicy", "MinLatencyRise", si.WithRollbackPolicy(si.RollbackPolicy{MinLatencyRise: -1})},
	{"WithRollbackPolicy", "MinLatencyRise", si.WithRollbackPolicy(si.RollbackPolicy{MinLatencyRise: day + 1})},
	{"WithRollbackPolicy", "MaxLatencyRiseOnGain", si.WithRollbackPolicy(si.RollbackPolicy{MaxLatencyRiseOnGain: 1e300})},
	{"WithRollbackPolicy", "MaxConsecutiveFailures", si.WithRollbackPolicy(si.RollbackPolicy{MaxConsecutiveFailures: math.MaxInt})},
	{"WithRollbackPolicy", "FalseRollbacks", si.WithRollbackPolicy(si.RollbackPolicy{FalseRollbacks: -0.1})},
	{"WithRollbackPolicy", "FalseRollbacks", si.WithRollbackPolicy(si.RollbackPolicy{FalseRollbacks: 1})},
	{"WithRollbackPolicy", "FalseRollbacks", si.WithRollbackPolicy(si.RollbackPolicy{FalseRollbacks: math.NaN()})},
	{"WithRollbackPolicy", "MissedRollbacks", si.WithRollbackPolicy(si.RollbackPolicy{MissedRollbacks: 1.5})},
	{"WithRollbackPolicy", "MissedRollbacks", si.WithRollbackPolicy(si.RollbackPolicy{MissedRollbacks: math.Inf(1)})},
	{"WithRollbackPolicy", "MaxCalls", si.WithRollbackPolicy(si.RollbackPolicy{MaxCalls: -1})},
	{"WithRollbackPolicy", "MaxCalls", si.WithRollbackPolicy(si.RollbackPolicy{MaxCalls: 1_000_001})},
	{"WithRollbackPolicy", "BackstopCalls", si.WithRollbackPolicy(si.RollbackPolicy{BackstopCalls: 1_000_001})},
	{"WithRollbackPolicy", "RefuseFor", si.WithRollbackPolicy(si.RollbackPolicy{RefuseFor: 367 * day})},
	{"WithRollbackPolicy", "CanaryFraction", si.WithRollbackPolicy(si.RollbackPolicy{CanaryFraction: -0.1})},
	{"WithRollbackPolicy", "CanaryFraction", si.WithRollbackPolicy(si.RollbackPolicy{CanaryFraction: 0.6})},
	{"WithRollbackPolicy", "CanaryFraction", si.WithRollbackPolicy(si.RollbackPolicy{CanaryFraction: math.NaN()})},
	{"WithRollbackPolicy", "CanaryCalls", si.WithRollbackPolicy(si.RollbackPolicy{CanaryCalls: -1})},
	{"WithRollbackPolicy", "CanaryCalls", si.WithRollbackPolicy(si.RollbackPolicy{CanaryCalls: 1_000_001})},

	{"WithRetryPolicy", "MaxWait", si.WithRetryPolicy(si.RetryPolicy{MaxWait: -1})},
	{"WithRetryPolicy", "MaxWait", si.WithRetryPolicy(si.RetryPolicy{MaxWait: 2 * time.Hour})},
	{"WithRetryPolicy", "Permanent: 65 classes", si.WithRetryPolicy(si.RetryPolicy{Permanent: make([]failure.Class, 65)})},
	{"WithRetryPolicy", "Permanent[1]: an empty class", si.WithRetryPolicy(si.RetryPolicy{Permanent: []failure.Class{"x", ""}})},
	{"WithRetryPolicy", "Permanent[0]: 65 bytes", si.WithRetryPolicy(si.RetryPolicy{Permanent: []failure.Class{failure.Class(strings.Repeat("c", 65))}})},
	{"WithRetryPolicy", "Permanent[0]", si.WithRetryPolicy(si.RetryPolicy{Permanent: []failure.Class{"\xff"}})},

	{"WithCircuitBreaker", "Failures", si.WithCircuitBreaker(si.CircuitBreaker{Failures: -1})},
	{"WithCircuitBreaker", "Failures", si.WithCircuitBreaker(si.CircuitBreaker{Failures: 65})},
	{"WithCircuitBreaker", "CoolOff", si.WithCircuitBreaker(si.CircuitBreaker{CoolOff: -time.Second})},
	{"WithCircuitBreaker", "CoolOff", si.WithCircuitBreaker(si.CircuitBreaker{CoolOff: day + 1})},
	{"WithCircuitBreaker", "CoolOffCalls", si.WithCircuitBreaker(si.CircuitBreaker{CoolOffCalls: 10_001})},

	{"WithProbes", "Every", si.WithProbes(si.ProbePolicy{Every: -1})},
	{"WithProbes", "Every", si.WithProbes(si.ProbePolicy{Every: day + 1})},
	{"WithProbes", "MaxEvery", si.WithProbes(si.ProbePolicy{MaxEvery: -1})},
	{"WithProbes", "MaxEvery", si.WithProbes(si.ProbePolicy{MaxEvery: day + 1})},
	{"WithProbes", "MaxEvery: 5m0s, below Every 10m0s", si.WithProbes(si.ProbePolicy{Every: 10 * time.Minute, MaxEvery: 5 * time.Minute})},
	{"WithProbes", "DeadFor", si.WithProbes(si.ProbePolicy{DeadFor: -1})},
	{"WithProbes", "DeadFor", si.WithProbes(si.ProbePolicy{DeadFor: 367 * day})},
	{"WithProbes", "NoHold[1]", si.WithProbes(si.ProbePolicy{NoHold: []failure.Class{failure.ClassQuota, failure.ClassTimeout}})},

	{"WithMemory", "MaxClusters", si.WithMemory(si.MemoryOptions{MaxClusters: -1})},
	{"WithMemory", "MaxClusters", si.WithMemory(si.MemoryOptions{MaxClusters: 1_000_001})},
	{"WithMemory", "HalfLife", si.WithMemory(si.MemoryOptions{HalfLife: -time.Hour})},
	{"WithMemory", "HalfLife", si.WithMemory(si.MemoryOptions{HalfLife: 367 * day})},

	{"WithNotifyOptions", "Queue", si.WithNotifyOptions(si.NotifyOptions{Queue: -1})},
	{"WithNotifyOptions", "Queue", si.WithNotifyOptions(si.NotifyOptions{Queue: 1<<20 + 1})},
	{"WithNotifyOptions", "Attempts", si.WithNotifyOptions(si.NotifyOptions{Attempts: -1})},
	{"WithNotifyOptions", "Attempts", si.WithNotifyOptions(si.NotifyOptions{Attempts: 101})},
	{"WithNotifyOptions", "Backoff", si.WithNotifyOptions(si.NotifyOptions{Backoff: -1})},
	{"WithNotifyOptions", "Backoff", si.WithNotifyOptions(si.NotifyOptions{Backoff: 2 * time.Hour})},
	{"WithNotifyOptions", "MaxBackoff", si.WithNotifyOptions(si.NotifyOptions{MaxBackoff: -1})},
	{"WithNotifyOptions", "MaxBackoff", si.WithNotifyOptions(si.NotifyOptions{MaxBackoff: 2 * time.Hour})},
	{"WithNotifyOptions", "BurstLimit", si.WithNotifyOptions(si.NotifyOptions{BurstLimit: 1<<20 + 1})},
	{"WithNotifyOptions", "BurstWindow", si.WithNotifyOptions(si.NotifyOptions{BurstWindow: -1})},
	{"WithNotifyOptions", "BurstWindow", si.WithNotifyOptions(si.NotifyOptions{BurstWindow: day + 1})},
	{"WithNotifyOptions", "Timeout", si.WithNotifyOptions(si.NotifyOptions{Timeout: -1})},
	{"WithNotifyOptions", "Timeout", si.WithNotifyOptions(si.NotifyOptions{Timeout: 2 * time.Hour})},

	{"WithRoutes", "Fallbacks: 16 routes", si.WithRoutes(si.Routes{Fallbacks: make([]string, 16)})},
	{"WithRoutes", "Primary: 257 bytes", si.WithRoutes(si.Routes{Primary: strings.Repeat("p", 257)})},
	{"WithRoutes", "Primary", si.WithRoutes(si.Routes{Primary: "\xff"})},
	{"WithRoutes", "Fallbacks[1]: 257 bytes", si.WithRoutes(si.Routes{Fallbacks: []string{"a", strings.Repeat("f", 257)}})},
	{"WithRoutes", "Models: 65 entries", si.WithRoutes(si.Routes{Models: params(65, 1, 1)})},
	{"WithRoutes", `Models["k0xx`, si.WithRoutes(si.Routes{Models: params(1, 257, 1)})},
	{"WithRoutes", `Models["k0"]: 257 bytes`, si.WithRoutes(si.Routes{Models: params(1, 1, 257)})},
}

func TestOptionBounds(t *testing.T) {
	for _, c := range optionRows {
		t.Run(c.option+"/"+c.field, func(t *testing.T) {
			l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), c.opt)
			if err == nil {
				l.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), c.option+": "+c.field) {
				t.Fatalf("New = %v, want ErrInvalidOption naming %s: %s", err, c.option, c.field)
			}
		})
	}
}

// TestOptionSpecialValues: the documented special values and the bounds
// themselves are accepted.
func TestOptionSpecialValues(t *testing.T) {
	for i, opt := range []si.Option{
		si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: -1, MaxLatencyRise: math.Inf(1), MaxLatencyRiseOnGain: math.NaN(),
			MaxConsecutiveFailures: -1, MinBeforeCalls: -1, BackstopCalls: -1, RefuseFor: -1}),
		si.WithRollbackPolicy(si.RollbackPolicy{MaxSuccessDrop: 100, MaxLatencyRise: 10_000, MaxLatencyRiseOnGain: 10_000,
			MinCalls: 1_000_000, MaxCalls: 1_000_000, BackstopCalls: 1_000_000, CanaryCalls: 1_000_000, MaxConsecutiveFailures: 1_000_000,
			BeforeCalls: 16, MinBeforeCalls: 16, MinLatencyRise: day, RefuseFor: 366 * day, CanaryFraction: 0.5, Method: si.MethodCanary}),
		si.WithRetryPolicy(si.RetryPolicy{MaxWait: time.Hour, Permanent: []failure.Class{}}),
		si.WithCircuitBreaker(si.CircuitBreaker{Failures: 64, CoolOff: day, CoolOffCalls: -1}),
		si.WithProbes(si.ProbePolicy{Every: day, MaxEvery: day, DeadFor: 366 * day, NoHold: []failure.Class{failure.ClassAuth, failure.ClassQuota}}),
		si.WithMemory(si.MemoryOptions{MaxClusters: 1000, HalfLife: 366 * day}),
		si.WithNotifyOptions(si.NotifyOptions{Queue: 1 << 20, Attempts: 100, Backoff: time.Hour, MaxBackoff: time.Hour,
			BurstLimit: -1, BurstWindow: day, Timeout: time.Hour}),
		si.WithRoutes(si.Routes{Primary: strings.Repeat("p", 256), Fallbacks: fallbacks(15, 256), Models: params(64, 256, 256)}),
	} {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), opt)
		if err != nil {
			t.Errorf("option %d: %v", i, err)
			continue
		}
		l.Close()
	}
}

func TestSetThresholdBounds(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		th    si.Threshold
		field string
	}{
		{si.Threshold{Failures: 0, Window: time.Hour}, "threshold.failures: 0, less than 1"},
		{si.Threshold{Failures: 65, Window: time.Hour}, "threshold.failures: 65, more than 64"},
		{si.Threshold{Failures: 1}, "threshold.window: 0s, not positive"},
		{si.Threshold{Failures: 1, Window: -time.Hour}, "threshold.window"},
		{si.Threshold{Failures: 1, Window: 367 * day}, "threshold.window: 8808h0m0s, more than 8784h"},
		{si.Threshold{Failures: 1, Window: time.Hour, Cooldown: -1}, "threshold.cooldown: -1ns, negative"},
		{si.Threshold{Failures: 1, Window: time.Hour, Cooldown: 367 * day}, "threshold.cooldown"},
	} {
		if err := e.l.SetThreshold("a", c.th); !errors.Is(err, si.ErrInvalidThreshold) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("SetThreshold(%+v) = %v, want ErrInvalidThreshold naming %s", c.th, err, c.field)
		}
	}
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 64, Window: 366 * day, Cooldown: 366 * day}); err != nil {
		t.Errorf("SetThreshold at the bounds = %v", err)
	}
}

func TestSetRoutesBounds(t *testing.T) {
	e := newEnv(t)
	err := e.l.SetRoutes("a", si.Routes{Fallbacks: []string{"ok", "\xff"}})
	if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "SetRoutes: Fallbacks[1]") {
		t.Fatalf("SetRoutes = %v, want ErrInvalidOption naming Fallbacks[1]", err)
	}
}

// fallbacks returns n distinct routes of size bytes each.
func fallbacks(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat(string(rune('a'+i)), size)
	}
	return out
}
