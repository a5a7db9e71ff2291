package selfimprove

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// The state machine's transitions, at fixed instants, with no Loop, clock
// or store: each test builds an agentState, drives it, and checks the
// state and the effects.

var st0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// testRules are the default policies with deterministic IDs.
func testRules(mod ...func(*ruleBook)) *ruleBook {
	n := 0
	// No minimum of calls before a change, so that three failures of a
	// fresh state trigger; TestStateColdStart covers the minimum.
	r := &ruleBook{policy: RollbackPolicy{MinBeforeCalls: -1}.withDefaults(), newID: func(time.Time) string { n++; return fmt.Sprintf("id-%d", n) }}
	for _, f := range mod {
		f(r)
	}
	return r
}

// freshState is a new agent at v1 with a manual threshold of 3 failures
// in an hour and a 10-minute cooldown.
func freshState() *agentState {
	s := newState("agent", Config{Version: 1, Timeout: time.Second, Route: "primary"})
	s.Manual = &thresholdJSON{Failures: 3, Window: jsonDuration(time.Hour), Cooldown: jsonDuration(10 * time.Minute)}
	return &s
}

// book records one call of s ending at at, under the current generation.
func book(s *agentState, r *ruleBook, at time.Time, failed bool) effects {
	c := call{gen: s.Gen, version: s.Config.Version, end: at, dur: 10 * time.Millisecond, failed: failed}
	var sig []byte
	if failed {
		c.text, c.class, c.cluster = "upstream 503", failure.ClassOverloaded, failure.ClusterOf([]byte("upstream <n>"))
		sig = []byte("upstream <n>")
	}
	return recordOf(s, &c, sig, r)
}

// applyTimeout drives s to a trigger at st0 and applies a tweak raising the
// timeout, returning the change.
func applyTimeout(t *testing.T, s *agentState, r *ruleBook) *Change {
	t.Helper()
	var eff effects
	for i := range 3 {
		eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
	}
	if eff.analysis == nil {
		t.Fatal("3 failures in the window did not trigger an analysis")
	}
	tw := &Tweak{Config: s.Config, Reason: "raise the timeout"}
	tw.Config.Timeout = 2 * time.Second
	eff, err := s.finishAnalysis(st0.Add(3*time.Second), eff.analysis, eff.th, tw, nil, r)
	if err != nil || eff.applied == nil {
		t.Fatalf("apply: %v, %+v", err, eff)
	}
	return eff.applied
}

// failures counts the failed calls.
func failures(calls []bool) int {
	n := 0
	for _, f := range calls {
		if f {
			n++
		}
	}
	return n
}

func TestStateRecordTrigger(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(s *agentState)
		calls   []bool // failed?
		trigger bool
	}{
		{"below the threshold", nil, []bool{true, true}, false},
		{"at the threshold", nil, []bool{true, true, true}, true},
		{"a success between does not reset the window", nil, []bool{true, false, true, true}, true},
		{"in cooldown for the same cluster", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("upstream <n>"))
		}, []bool{true, true, true}, false},
		{"in cooldown for another cluster: a new kind of fault triggers", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("other"))
		}, []bool{true, true, true}, true},
		{"in cooldown for another cluster: a new kind below the threshold", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("other"))
		}, []bool{true, true}, false},
		{"in cooldown for another cluster: one the analysis left unanswered triggers at the secondary bar", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("other"))
			s.leftOpen = uint16(failure.ClusterOf([]byte("upstream <n>")))
		}, []bool{true, true}, true},
		{"in cooldown for another cluster: left unanswered, then proposed", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("other"))
			s.leftOpen = uint16(failure.ClusterOf([]byte("upstream <n>")))
			s.Proposals = []Proposal{{ClusterID: failure.FormatClusterID(failure.ClusterOf([]byte("upstream <n>")))}}
		}, []bool{true, true}, false},
		{"in cooldown for another cluster, ended early once already", func(s *agentState) {
			s.CooldownUntil, s.CooldownCluster, s.CooldownEarly = st0.Add(time.Hour).UnixNano(), failure.ClusterOf([]byte("other")), true
		}, []bool{true, true, true}, false},
		{"while analysing", func(s *agentState) { s.analyzing = true }, []bool{true, true, true}, false},
		{"successes only", nil, []bool{false, false, false}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r := freshState(), testRules()
			if tt.prepare != nil {
				tt.prepare(s)
			}
			var eff effects
			for i, failed := range tt.calls {
				eff = book(s, r, st0.Add(time.Duration(i)*time.Second), failed)
			}
			if got := eff.analysis != nil; got != tt.trigger {
				t.Fatalf("triggered %v, want %v", got, tt.trigger)
			}
			if tt.trigger {
				an := eff.analysis
				if !s.analyzing || an.AgentID != "agent" || an.Config.Version != 1 || an.Threshold.Failures != 3 ||
					len(an.Failures) != failures(tt.calls) || len(an.Clusters) != 1 || an.Clusters[0].Class != failure.ClassOverloaded {
					t.Fatalf("analysis = %+v", an)
				}
			}
			if st := s.Tracker.stats(st0.Add(time.Minute).UnixNano()); st.Calls != len(tt.calls) {
				t.Fatalf("calls counted = %d, want %d", st.Calls, len(tt.calls))
			}
		})
	}
}

func TestStateRecordIgnoredAndStale(t *testing.T) {
	s, r := freshState(), testRules()
	c := call{gen: s.Gen, end: st0, failed: true, ignored: true}
	if eff := recordOf(s, &c, nil, r); eff.analysis != nil || eff.save || s.Tracker.Ignored != 1 || s.Tracker.Total != 0 {
		t.Fatalf("ignored call: %+v, tracker total %d ignored %d", eff, s.Tracker.Total, s.Tracker.Ignored)
	}
	// Failures of calls that started under an older generation never
	// trigger for the config in force.
	s.Gen = 5
	for i := range 3 {
		c := call{gen: 4, version: 1, end: st0.Add(time.Duration(i) * time.Second), failed: true, cluster: 1}
		if eff := recordOf(s, &c, []byte("x"), r); eff.analysis != nil {
			t.Fatal("a stale generation's failures triggered an analysis")
		}
	}
}

func TestStateApply(t *testing.T) {
	rolled := Config{Version: 7, Timeout: time.Second, Route: "mirror"}
	tests := []struct {
		name    string
		prepare func(s *agentState, an *Analysis)
		tweak   func(c Config) Config
		err     error
	}{
		{"applied", nil, func(c Config) Config { c.Timeout = 3 * time.Second; return c }, nil},
		{"stale: the config changed since the analysis", func(s *agentState, an *Analysis) { an.Config.Version = 0 },
			func(c Config) Config { c.Timeout = 3 * time.Second; return c }, ErrStale},
		{"invalid", nil, func(c Config) Config { c.MaxAttempts = -1; return c }, ErrTweakRejected},
		{"the current config", nil, func(c Config) Config { return c }, ErrTweakRejected},
		{"repeats a rolled-back tweak", func(s *agentState, an *Analysis) {
			s.Rejected = []Tweak{{Config: rolled, Reason: "mirror"}}
		}, func(c Config) Config { c.Route = "mirror"; return c }, ErrTweakRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r := freshState(), testRules()
			var eff effects
			for i := range 3 {
				eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
			}
			an := eff.analysis
			if tt.prepare != nil {
				tt.prepare(s, an)
			}
			gen := s.Gen
			tw := &Tweak{Config: tt.tweak(s.Config), Reason: "r"}
			now := st0.Add(time.Minute)
			eff, err := s.finishAnalysis(now, an, eff.th, tw, nil, r)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if s.analyzing || s.CooldownUntil != now.Add(10*time.Minute).UnixNano() || !eff.save {
				t.Fatalf("cooldown not started: analyzing %v, until %d, save %v", s.analyzing, s.CooldownUntil, eff.save)
			}
			if eff.rejected != errors.Is(tt.err, ErrTweakRejected) {
				t.Fatalf("rejected = %v", eff.rejected)
			}
			if tt.err != nil {
				if eff.applied != nil || s.Gen != gen || s.Config.Version != 1 || len(eff.events) != 0 {
					t.Fatalf("a refused tweak changed the state: %+v", eff)
				}
				return
			}
			ch := eff.applied
			if ch == nil || ch.To.Version != 2 || ch.From.Version != 1 || s.Config.Version != 2 || s.MaxVersion != 2 ||
				s.Gen != gen+1 || s.Verifying == nil || s.Verifying.ID != ch.ID || len(s.History) != 1 || !eff.publish ||
				ch.Cluster != failure.FormatClusterID(failure.ClusterOf([]byte("upstream <n>"))) || ch.Before.Calls != 3 {
				t.Fatalf("applied change %+v, state v%d gen %d", ch, s.Config.Version, s.Gen)
			}
			if len(eff.events) != 1 || eff.events[0].Type != EventImprovementApplied || !eff.events[0].Time.Equal(now) {
				t.Fatalf("events = %+v", eff.events)
			}
		})
	}
}

func TestStateStrategyErrorAndNoTweak(t *testing.T) {
	for _, tc := range []struct {
		tw  *Tweak
		err error
	}{{nil, nil}, {nil, ErrStrategyTimeout}} {
		s, r := freshState(), testRules()
		var eff effects
		for i := range 3 {
			eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
		}
		eff, err := s.finishAnalysis(st0, eff.analysis, eff.th, tc.tw, tc.err, r)
		if !errors.Is(err, tc.err) || eff.applied != nil || !eff.save || s.analyzing || s.CooldownUntil == 0 {
			t.Fatalf("%v: err %v, %+v", tc.err, err, eff)
		}
	}
}

func TestStateVerification(t *testing.T) {
	tests := []struct {
		name     string
		calls    []bool // failed? after the change
		decision EventType
		version  int // in force after
		rejected int
		fix      FixOutcome
	}{
		{"confirmed after MinCalls successes", repeat(false, 10), EventChangeConfirmed, 2, 0, FixConfirmed},
		{"rolled back on 5 consecutive failures", repeat(true, 5), EventRolledBack, 1, 1, FixRolledBack},
		{"undecided before MinCalls", repeat(false, 9), "", 2, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r := freshState(), testRules()
			ch := applyTimeout(t, s, r)
			var eff effects
			for i, failed := range tt.calls {
				eff = book(s, r, st0.Add(time.Minute+time.Duration(i)*time.Second), failed)
				if eff.decided != nil && i != len(tt.calls)-1 {
					t.Fatalf("decided after %d calls", i+1)
				}
			}
			if eff.decision != tt.decision {
				t.Fatalf("decision %q, want %q", eff.decision, tt.decision)
			}
			if s.Config.Version != tt.version || len(s.Rejected) != tt.rejected {
				t.Fatalf("v%d with %d rejected, want v%d with %d", s.Config.Version, len(s.Rejected), tt.version, tt.rejected)
			}
			if tt.decision == "" {
				if s.Verifying == nil || s.Verify.Calls != len(tt.calls) {
					t.Fatalf("verification lost: %+v", s.Verify)
				}
				return
			}
			if s.Verifying != nil || len(s.Changes) != 1 || s.Changes[0].ID != ch.ID || eff.decided.ID != ch.ID || !eff.save || !eff.publish {
				t.Fatalf("decided state: verifying %v, changes %d, eff %+v", s.Verifying, len(s.Changes), eff)
			}
			if len(eff.fixes) != 1 || eff.fixes[0].fix.State != tt.fix || eff.fixes[0].cluster != ch.Cluster {
				t.Fatalf("fixes = %+v", eff.fixes)
			}
			if len(eff.events) != 1 || eff.events[0].Type != tt.decision || eff.events[0].Change.ID != ch.ID {
				t.Fatalf("events = %+v", eff.events)
			}
			if tt.decision == EventRolledBack && (len(s.History) != 0 || s.Config.Timeout != time.Second) {
				t.Fatalf("rollback left history %v, config %+v", s.History, s.Config)
			}
		})
	}
}

func repeat(v bool, n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestStateCanaryControlArm(t *testing.T) {
	s := freshState()
	r := testRules(func(r *ruleBook) { r.policy = RollbackPolicy{Method: MethodCanary, MinBeforeCalls: -1}.withDefaults() })
	applyTimeout(t, s, r)
	c := call{gen: s.Gen, version: 1, arm: ArmControl, end: st0.Add(time.Minute), dur: time.Millisecond}
	recordOf(s, &c, nil, r)
	if s.Control.Calls != 1 || s.Verify.Calls != 0 {
		t.Fatalf("control %+v, verify %+v", s.Control, s.Verify)
	}
}

func TestStateUnapply(t *testing.T) {
	s, r := freshState(), testRules()
	ch := applyTimeout(t, s, r)
	gen := s.Gen
	if !s.unapply(ch) || s.Verifying != nil || s.Config.Version != 1 || len(s.History) != 0 || s.Gen != gen+1 {
		t.Fatalf("unapply: v%d, history %v", s.Config.Version, s.History)
	}
	if s.unapply(ch) {
		t.Fatal("unapply twice")
	}
}

func TestStateSetConfigSupersedes(t *testing.T) {
	s, r := freshState(), testRules()
	ch := applyTimeout(t, s, r)
	eff := s.setConfig(st0.Add(time.Hour), Config{Route: "backup"}, r)
	if s.Verifying != nil || s.Config.Version != 3 || s.Config.Route != "backup" || len(s.Changes) != 1 ||
		s.Changes[0].ID != ch.ID || s.Changes[0].State != ChangeSuperseded {
		t.Fatalf("state after SetConfig: v%d %+v, changes %+v", s.Config.Version, s.Config, s.Changes)
	}
	if len(eff.fixes) != 1 || eff.fixes[0].fix.State != FixSuperseded || !eff.save || !eff.publish ||
		len(eff.events) != 1 || eff.events[0].Type != EventConfigSet {
		t.Fatalf("effects = %+v", eff)
	}
}

func TestStateRewind(t *testing.T) {
	s, r := freshState(), testRules()
	applyTimeout(t, s, r)
	for range 10 {
		book(s, r, st0.Add(time.Minute), false) // confirms v2
	}
	if s.Verifying != nil || s.Config.Version != 2 {
		t.Fatal("v2 not confirmed")
	}
	s.Rejected = []Tweak{{Config: Config{Version: 1, Timeout: time.Second, Route: "primary"}}}
	tests := []struct {
		version int
		err     error
	}{{9, ErrUnknownVersion}, {2, ErrTweakRejected}, {1, nil}}
	for _, tt := range tests {
		ch, eff, err := s.rewind(st0.Add(time.Hour), tt.version, "operator", r)
		if !errors.Is(err, tt.err) {
			t.Fatalf("rewind to v%d: %v, want %v", tt.version, err, tt.err)
		}
		if err != nil {
			continue
		}
		if ch.To.Version != 3 || ch.To.Timeout != time.Second || s.Verifying == nil || !eff.save || len(s.Rejected) != 1 {
			t.Fatalf("rewind: %+v, state v%d", ch, s.Config.Version)
		}
	}
}

func TestStateBreaker(t *testing.T) {
	r := testRules(func(r *ruleBook) { r.breaker = CircuitBreaker{Failures: 3, CoolOff: time.Minute, CoolOffCalls: -1} })
	s := freshState()
	s.Manual = &thresholdJSON{Failures: 60, Window: jsonDuration(time.Hour)}
	var eff effects
	for i := range 3 {
		eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
	}
	until := st0.Add(2 * time.Second).Add(time.Minute).UnixNano()
	if !eff.circuit || s.CircuitOpenUntil != until || eff.events[0].Type != EventCircuitOpened || !eff.save {
		t.Fatalf("circuit not opened: %+v, until %d", eff, s.CircuitOpenUntil)
	}
	// Plain words first (issue 43, item 6); it read "3 consecutive
	// failures under config v1".
	if msg, want := eff.events[0].Message, `agent "agent": circuit opened for 1m0s: the last 3 calls under v1 failed in a row, and no change is being tried; `; !strings.HasPrefix(msg, want) {
		t.Errorf("message %q, want it to begin %q", msg, want)
	}
	probe := func(at time.Time, failed bool) effects {
		c := call{gen: s.Gen, version: 1, probe: true, end: at, failed: failed, cluster: 1}
		return recordOf(s, &c, []byte("x"), r)
	}
	at := st0.Add(2 * time.Minute)
	if eff := probe(at, true); s.CircuitOpenUntil != at.Add(time.Minute).UnixNano() || eff.events[0].Type != EventCircuitOpened {
		t.Fatalf("a failed probe did not reopen: %+v", eff)
	}
	if eff := probe(at.Add(2*time.Minute), false); s.CircuitOpenUntil != 0 || eff.events[0].Type != EventCircuitClosed {
		t.Fatalf("a successful probe did not close: %+v", eff)
	}
	// Not while a change is verified.
	s2 := freshState()
	applyTimeout(t, s2, testRules())
	for i := range 3 {
		book(s2, r, st0.Add(time.Minute+time.Duration(i)*time.Second), true)
	}
	if s2.CircuitOpenUntil != 0 {
		t.Fatal("the circuit opened during a verification")
	}
}

func TestStateProposals(t *testing.T) {
	s, r := freshState(), testRules()
	var eff effects
	for i := range 3 {
		eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
	}
	an := eff.analysis
	cfg := s.Config
	cfg.Route = "backup"
	tw := &Tweak{Config: cfg, Reason: "switch", Review: true}
	eff, err := s.finishAnalysis(st0, an, eff.th, tw, nil, r)
	if err != nil || len(eff.proposals) != 1 || len(eff.events) != 1 || eff.events[0].Type != EventProposalFiled {
		t.Fatalf("filing: %v, %+v", err, eff)
	}
	id := eff.proposals[0].ID
	// The same suggestion again folds into the pending proposal.
	s.analyzing = true
	if eff, _ := s.finishAnalysis(st0, an, Threshold{}, tw, nil, r); len(eff.proposals) != 0 || len(s.Proposals) != 1 {
		t.Fatalf("refiled: %+v", eff)
	}
	// Approved while a change is verified: refused.
	s.Verifying = &Change{ID: "v"}
	if _, _, err := s.approve(st0, id, r); !errors.Is(err, ErrVerifying) {
		t.Fatalf("approve while verifying: %v", err)
	}
	s.Verifying = nil
	ch, eff, err := s.approve(st0, id, r)
	if err != nil || ch == nil || ch.ProposalID != id || s.proposal(id).Status != ProposalApplied || len(eff.events) != 2 {
		t.Fatalf("approve: %v, %+v", err, eff)
	}
	if _, _, err := s.approve(st0, id, r); !errors.Is(err, ErrProposalState) {
		t.Fatalf("approve twice: %v", err)
	}
	if _, _, err := s.approve(st0, "nope", r); !errors.Is(err, ErrProposalNotFound) {
		t.Fatalf("approve unknown: %v", err)
	}
	// Taken back when it cannot be saved.
	s.unapprove(id, ch)
	if p := s.proposal(id); p.Status != ProposalPending || s.Verifying != nil || s.Config.Version != 1 {
		t.Fatalf("unapprove: %+v", p)
	}
	eff, err = s.reject(st0, id, "no", r)
	if err != nil || s.proposal(id).Status != ProposalRejected || len(eff.fixes) != 1 || eff.fixes[0].fix.State != FixRejected {
		t.Fatalf("reject: %v, %+v", err, eff)
	}
	if _, err := s.reject(st0, id, "again", r); !errors.Is(err, ErrProposalState) {
		t.Fatalf("reject twice: %v", err)
	}
}

func TestStateOperatorSet(t *testing.T) {
	s, r := freshState(), testRules()
	eff := s.operatorSet(st0, EventCriticalSet, "m", func(s *agentState) { s.Manual, s.Critical = nil, true }, r)
	if th, prof := s.threshold(st0.UnixNano()); prof != ProfileCritical || th.Failures == 0 || !eff.save ||
		len(eff.events) != 1 || eff.events[0].Type != EventCriticalSet {
		t.Fatalf("critical: %v %v %+v", th, prof, eff)
	}
}

func TestStateColdStart(t *testing.T) {
	// The default policy: no analysis before an automatically profiled
	// agent has made MinBeforeCalls (10) calls. An operator's threshold
	// is obeyed from the first call (TestOperatorThresholdFromTheFirstCall).
	s, r := freshState(), testRules(func(r *ruleBook) { r.policy = RollbackPolicy{}.withDefaults() })
	s.Manual = nil
	for i := range 9 {
		if eff := book(s, r, st0.Add(time.Duration(i)*time.Second), true); eff.analysis != nil {
			t.Fatalf("call %d of a new agent triggered an analysis", i+1)
		}
	}
	if eff := book(s, r, st0.Add(9*time.Second), true); eff.analysis == nil {
		t.Fatal("the 10th call, a failure over the threshold, did not trigger")
	}
}

func TestStateEarlyCooldownRecordsItsKind(t *testing.T) {
	s, r := freshState(), testRules()
	var eff effects
	for i := range 3 {
		eff = book(s, r, st0.Add(time.Duration(i)*time.Second), true)
	}
	if _, err := s.finishAnalysis(st0, eff.analysis, eff.th, nil, nil, r); err != nil {
		t.Fatal(err)
	}
	if want := failure.ClusterOf([]byte("upstream <n>")); s.CooldownCluster != want || s.CooldownEarly {
		t.Fatalf("cooldown cluster %x early %v, want %x and false", s.CooldownCluster, s.CooldownEarly, want)
	}
	// A new kind of fault during the cooldown: three failures of another
	// cluster trigger once.
	other := func(at time.Time) effects {
		c := call{gen: s.Gen, version: s.Config.Version, end: at, dur: time.Millisecond, failed: true,
			text: "401 unauthorized", class: failure.ClassAuth, cluster: failure.ClusterOf([]byte("unauthorized"))}
		return recordOf(s, &c, []byte("unauthorized"), r)
	}
	for i := range 3 {
		eff = other(st0.Add(time.Duration(10+i) * time.Second))
	}
	if eff.analysis == nil {
		t.Fatal("a new kind of fault during the cooldown did not trigger")
	}
	// The analysis is about the new kind only.
	newID := failure.FormatClusterID(failure.ClusterOf([]byte("unauthorized")))
	if len(eff.analysis.Clusters) != 1 || eff.analysis.Clusters[0].ID != newID || len(eff.analysis.Failures) != 3 {
		t.Fatalf("early analysis: clusters %+v, %d failures; want the new kind's cluster and its 3 failures",
			eff.analysis.Clusters, len(eff.analysis.Failures))
	}
	for _, f := range eff.analysis.Failures {
		if f.Cluster != newID {
			t.Fatalf("early analysis holds a failure of cluster %s", f.Cluster)
		}
	}
	if _, err := s.finishAnalysis(st0.Add(time.Minute), eff.analysis, eff.th, nil, nil, r); err != nil {
		t.Fatal(err)
	}
	if !s.CooldownEarly {
		t.Fatal("the early analysis's cooldown is not marked early")
	}
	// The next cooldown is whole: the first kind of fault waits for it.
	for i := range 3 {
		if eff := book(s, r, st0.Add(time.Duration(120+i)*time.Second), true); eff.analysis != nil {
			t.Fatal("a second early analysis in one cooldown")
		}
	}
}

func TestStateRefusalsAreScopedAndExpire(t *testing.T) {
	s := freshState()
	bad := Config{Version: 2, Timeout: time.Second, Route: "mirror"}
	cl := failure.FormatClusterID(failure.ClusterOf([]byte("upstream <n>")))
	s.Rejected = []Tweak{{Config: bad, Reason: "mirror", Cluster: cl, Until: st0.Add(time.Hour)}}
	tests := []struct {
		name    string
		at      time.Time
		cluster string
		refused bool
	}{
		{"same cluster, before Until", st0, cl, true},
		{"any cluster, before Until", st0, "", true},
		{"another cluster", st0, "00000000000000aa", false},
		{"same cluster, at Until", st0.Add(time.Hour), cl, false},
	}
	for _, tt := range tests {
		if got := len(s.refused(tt.at, tt.cluster)) == 1; got != tt.refused {
			t.Errorf("%s: refused %v, want %v", tt.name, got, tt.refused)
		}
	}
	// A rollback records the change's cluster and the end of its refusal.
	s2, r2 := freshState(), testRules()
	applyTimeout(t, s2, r2)
	for i := range 5 {
		book(s2, r2, st0.Add(time.Duration(100+i)*time.Second), true)
	}
	if len(s2.Rejected) != 1 {
		t.Fatalf("rejected = %+v", s2.Rejected)
	}
	rb := s2.Rejected[0]
	if rb.Cluster != cl || !rb.Until.Equal(st0.Add(104*time.Second).Add(DefaultRefuseFor)) {
		t.Fatalf("rolled-back tweak %+v, want cluster %s until %v", rb, cl, st0.Add(104*time.Second).Add(DefaultRefuseFor))
	}
}

// recordOf books c on s and returns the effects.
func recordOf(s *agentState, c *call, sig []byte, r *ruleBook) effects {
	var eff effects
	s.record(c, sig, r, &eff)
	return eff
}
