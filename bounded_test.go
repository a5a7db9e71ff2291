package selfimprove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/failure"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// fleetSample is what a fleet run measured at a checkpoint: the longest
// reason-like string anywhere the loop keeps one, where it was, and the
// live heap.
type fleetSample struct {
	calls   int // calls per agent so far
	longest int // bytes
	// grown is the longest string that could grow by copying: every one
	// but a verdict (and a proposal's note, which quotes it), which a
	// policy writes from its counts.
	grown int
	where string // which field held it
	heap  uint64 // HeapAlloc after a full GC
}

// longestString returns the longest string in a JSON document and its
// path.
func longestString(t *testing.T, doc []byte) (int, string) {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	n, where := 0, ""
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case string:
			if len(x) > n {
				n, where = len(x), path
			}
		case []any:
			for i, e := range x {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		case map[string]any:
			for k, e := range x {
				walk(e, path+"."+k)
			}
		}
	}
	walk(v, "")
	return n, where
}

// runFleet runs agents healthy agents for calls calls each, round robin,
// on a fake clock that moves a minute per round: 95 % of the attempts
// succeed, the others fail with the same 503 message. The built-in
// strategy has a fallback route. Every every calls per agent it measures
// the longest string in every agent's saved state (changes, verdicts,
// rejected tweaks, proposals), in Changes and Proposals, and in the
// failure memory (ExportMemory, Similar), and the live heap. It stops
// early once the longest string is over stopOver bytes, if stopOver > 0.
func runFleet(t *testing.T, agents, calls, every, stopOver int) []fleetSample {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// The store keeps few events: their log is the store's to bound, and
	// every event of a change carries its reason, which the states measure.
	store := &RAMStore{MaxLog: 64}
	l, err := New(WithStore(store), WithClock(clk), WithNotifier(nil),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithRetryPolicy(RetryPolicy{TransientAttempts: 1}), // the strategy's own answers, run after run
		WithRoutes(Routes{Fallbacks: []string{"fallback"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%02d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	unavailable := errors.New("503 service unavailable")
	step := time.Minute / time.Duration(agents)
	fn := func(context.Context, Config) error {
		clk.Advance(step)
		if rng.IntN(100) < 5 {
			return unavailable
		}
		return nil
	}
	ctx := context.Background()
	var out []fleetSample
	for c := 1; c <= calls; c++ {
		for _, id := range ids {
			if _, err := l.ExecuteWithImprovement(ctx, id, fn); err != nil && !errors.Is(err, unavailable) {
				t.Fatalf("call %d of %s: %v", c, id, err)
			}
		}
		if c%every != 0 && c != calls {
			continue
		}
		s := sampleFleet(t, l, store, ids, unavailable.Error(), c)
		m := l.Metrics()
		t.Logf("%d calls per agent: longest string %d bytes (%s); live heap %.2f MiB; %d strategy runs, %d changes, %d confirmed, %d rolled back",
			c, s.longest, s.where, float64(s.heap)/(1<<20), m.StrategyRuns, m.Improvements, m.Confirmations, m.Rollbacks)
		out = append(out, s)
		if stopOver > 0 && s.longest > stopOver {
			break
		}
	}
	return out
}

// sampleFleet measures, after c calls per agent of ids on l, the longest
// string in every agent's saved state in store, in Changes and Proposals,
// and in the failure memory (ExportMemory, Similar for text), and the live
// heap.
func sampleFleet(t *testing.T, l *Loop, store *RAMStore, ids []string, text string, c int) fleetSample {
	t.Helper()
	s := fleetSample{calls: c}
	note := func(n int, where string) {
		if n > s.longest {
			s.longest, s.where = n, where
		}
		if w := strings.ToLower(where); n > s.grown && !strings.HasSuffix(w, ".verdict") && !strings.HasSuffix(w, ".note") {
			s.grown = n
		}
	}
	for _, id := range ids {
		// An agent that has not yet changed is saved only by the
		// periodic flush.
		var doc []byte
		err := store.LoadAgent(id, func(b []byte) error { doc = bytes.Clone(b); return nil })
		switch {
		case err == nil:
			n, where := longestString(t, doc)
			note(n, id+" state"+where)
		case !errors.Is(err, fs.ErrNotExist):
			t.Fatalf("state of %s: %v", id, err)
		}
		for _, ch := range l.Changes(id) {
			note(len(ch.Reason), id+" Changes.Reason")
			note(len(ch.Verdict), id+" Changes.Verdict")
		}
	}
	for _, p := range l.Proposals(nil) {
		doc, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		n, where := longestString(t, doc)
		note(n, "Proposals"+where)
	}
	var mem bytes.Buffer
	if err := l.ExportMemory(&mem); err != nil {
		t.Fatal(err)
	}
	n, where := longestString(t, mem.Bytes())
	note(n, "ExportMemory"+where)
	for _, m := range l.Similar(text, 5) {
		for _, f := range m.Fixes {
			note(len(f.Reason), "Similar.Fixes.Reason")
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapAlloc
	return s
}

// TestLearnedReasonsStayBounded runs a fleet of healthy agents whose rare
// failures all look alike, so that fixes are learned from fixes learned
// from fixes. Every stored text stays within maxReason; the longest is no
// longer after 5,000 calls per agent than after 1,000; and the live heap
// grows by less than 20 % + 1 MiB between the two. Every agent's state is
// bounded in count (changes, rejected tweaks, proposals, clusters) and
// the store keeps 64 events, so once the fleet has warmed up only the
// collector's and the maps' slack moves the heap: about 0.2 MiB here, on
// a live heap of about 1 MiB. A learned reason that quoted the one it
// was learned from would double its escaping with every copy: over 1 MB
// by 2,000 calls per agent, and a live heap over 300 MiB by 2,250.
func TestLearnedReasonsStayBounded(t *testing.T) {
	agents, calls := 50, 5000
	if raceEnabled {
		agents, calls = 20, 1500
	}
	early := calls / 5
	got := runFleet(t, agents, calls, early/4, maxReason)
	for _, s := range got {
		if s.longest > maxReason {
			t.Fatalf("after %d calls per agent, a stored text is %d bytes (%s), over the cap %d", s.calls, s.longest, s.where, maxReason)
		}
	}
	if len(got) != 20 || got[3].calls != early || got[19].calls != calls {
		t.Fatalf("measured %d times, want 20 (every %d calls per agent)", len(got), early/4)
	}
	a, b := got[3], got[19]
	if b.grown > a.grown {
		t.Errorf("the longest stored text but verdicts grew from %d bytes after %d calls per agent to %d after %d",
			a.grown, a.calls, b.grown, b.calls)
	}
	if limit := a.heap + a.heap/5 + 1<<20; b.heap > limit {
		t.Errorf("the live heap grew from %d bytes after %d calls per agent to %d after %d, over %d",
			a.heap, a.calls, b.heap, b.calls, limit)
	}
}

func TestBoundText(t *testing.T) {
	long := strings.Repeat("a", 600)
	cases := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"empty", "", maxReason, ""},
		{"empty, no room", "", 0, ""},
		{"short", "abc", maxReason, "abc"},
		{"exactly at the cap", long[:maxReason], maxReason, long[:maxReason]},
		{"one over the cap", long[:maxReason+1], maxReason, long[:maxReason-3] + "…"},
		{"ascii cut", "abcdefgh", 6, "abc…"},
		// 'é' is 2 bytes: 3 of them fill 6, so 7 keeps 2 and the ellipsis.
		{"two-byte runes at the cut", "éééé", 7, "éé…"},
		{"two-byte runes exactly at the cap", "éééé", 8, "éééé"},
		{"two-byte runes one short", "éééé", 6, "é…"},
		// '𝄞' is 4 bytes: a cut inside one drops it whole.
		{"four-byte rune at the cut", "a𝄞𝄞", 7, "a…"},
		{"four-byte rune just fits", "a𝄞b𝄞", 8, "a𝄞…"},
		{"room for the ellipsis only", "abcd", 3, "…"},
		{"no room for the ellipsis", "ééé", 2, "é"},
		{"no room at all", "abc", 0, ""},
	}
	for _, c := range cases {
		got := failure.Bound(c.s, c.n)
		if got != c.want {
			t.Errorf("%s: failure.Bound(%q, %d) = %q, want %q", c.name, c.s, c.n, got, c.want)
		}
		if len(got) > max(c.n, 0) && len(c.s) > c.n || !utf8.ValidString(got) {
			t.Errorf("%s: %q is over %d bytes or not valid UTF-8", c.name, got, c.n)
		}
	}
	// Every length around a multi-byte rune: within the cap, valid, the
	// original's prefix, and marked when cut.
	s := strings.Repeat("aé𝄞€", 40)
	for n := range len(s) + 2 {
		got := failure.Bound(s, n)
		switch {
		case len(got) > n && n < len(s), !utf8.ValidString(got):
			t.Fatalf("failure.Bound(s, %d) = %q: over the cap or not valid UTF-8", n, got)
		case n >= len(s) && got != s:
			t.Fatalf("failure.Bound(s, %d) = %q, want s whole", n, got)
		case n < len(s) && n >= 3 && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(s, strings.TrimSuffix(got, "…"))):
			t.Fatalf("failure.Bound(s, %d) = %q, want a prefix of s and \"…\"", n, got)
		case n < len(s) && len(got) < n-3-3:
			t.Fatalf("failure.Bound(s, %d) = %q: cut more than a rune short", n, got)
		}
	}

	if got := boundTexts(nil, 2, 10); got != nil {
		t.Errorf("boundTexts(nil) = %q, want nil", got)
	}
	if got, want := boundTexts([]string{"short", strings.Repeat("x", 20), "third"}, 2, 10), []string{"short", "xxxxxxx…"}; !slices.Equal(got, want) {
		t.Errorf("boundTexts = %q, want %q", got, want)
	}
}

func TestLearnedReasonNamesItsSource(t *testing.T) {
	// The confirmed fix's reason is itself a learned one, long and full
	// of quotes: the new reason names the fix instead of quoting it.
	quoted := strings.Repeat(`learned: "learned: \"…\" was confirmed" `, 300)
	const cluster, change = "31b6a1e0c2d4f587", "0195f3c2-7a10-7c3e-9d51-2b8e4f6a1c90"
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	an := Analysis{
		AgentID:  "b",
		Config:   Config{MaxAttempts: 1},
		Clusters: []Cluster{{ID: "00000000000000aa", Class: failure.ClassOverloaded, Count: 5, LastSeen: now}},
		Memories: []Memory{{Cluster: cluster, Class: failure.ClassOverloaded, Similarity: 0.82, Confidence: 0.8, Fixes: []Fix{{
			AgentID: "a", ChangeID: change, From: Config{MaxAttempts: 1}, To: Config{MaxAttempts: 3},
			Reason: quoted, State: FixConfirmed, Time: now,
		}}}},
		Time: now,
	}
	tw, err := (&BuiltinStrategy{}).Analyze(context.Background(), an)
	if err != nil || tw == nil {
		t.Fatalf("Analyze = %+v, %v", tw, err)
	}
	want := "learned: applies the fix confirmed for a similar failure (cluster " + cluster + ", change " + change + ", similarity 0.82, confidence 0.80)"
	if tw.Config.MaxAttempts != 3 || tw.Reason != want {
		t.Fatalf("tweak = %d attempts, reason %q; want 3 attempts, reason %q", tw.Config.MaxAttempts, tw.Reason, want)
	}

	// Whatever IDs a memory read back from a store holds, the reason
	// keeps its shape.
	an.Memories[0].Cluster = strings.Repeat("c", 10000)
	an.Memories[0].Fixes[0].ChangeID = ""
	an.Memories[0].Fixes[0].ProposalID = strings.Repeat("p", 10000)
	tw, err = (&BuiltinStrategy{}).Analyze(context.Background(), an)
	if err != nil || tw == nil {
		t.Fatalf("Analyze = %+v, %v", tw, err)
	}
	if len(tw.Reason) > len(want)+2*maxRefID || !strings.Contains(tw.Reason, ", proposal ppp") || strings.Contains(tw.Reason, "learned: \"") {
		t.Fatalf("reason = %q (%d bytes)", tw.Reason, len(tw.Reason))
	}
}

// capped fails the test unless s is at most maxReason bytes, valid UTF-8,
// and, when cut (full is longer), a prefix of full ended by "…".
func capped(t *testing.T, what, s, full string) {
	t.Helper()
	switch {
	case len(s) > maxReason || !utf8.ValidString(s):
		t.Errorf("%s: %d bytes, over %d, or not valid UTF-8", what, len(s), maxReason)
	case len(full) > maxReason && (!strings.HasSuffix(s, "…") || !strings.HasPrefix(full, strings.TrimSuffix(s, "…"))):
		t.Errorf("%s = %.40q…: not a prefix of the text ended by \"…\"", what, s)
	case len(full) > maxReason && len(s) < maxReason-3-3:
		t.Errorf("%s: %d bytes, cut more than a rune short of %d", what, len(s), maxReason)
	}
}

func TestStoredTextsAreCapped(t *testing.T) {
	// A strategy (user code) that returns texts of a megabyte, of
	// 3-byte runes, and stuffs the analysis's examples.
	huge := strings.Repeat("€", 1<<20/3)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := fakeclock.New(now)
	var (
		mu       sync.Mutex
		rejected []Tweak
	)
	strat := hugeTextStrategy(huge, &mu, &rejected)
	l, err := New(WithStore(NewRAMStore()), WithClock(clk), WithNotifier(nil),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithStrategy(strat),
		WithRollbackPolicy(RollbackPolicy{MinBeforeCalls: -1})) // the first failure triggers
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetThreshold("a", Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	unavailable := errors.New("503 service unavailable")
	call := func(fail bool) Report {
		t.Helper()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error {
			clk.Advance(time.Second)
			if fail {
				return unavailable
			}
			return nil
		})
		if fail != (err != nil) {
			t.Fatalf("call returned %v", err)
		}
		return rep
	}

	// The automatic tweak: its change, then (failing at once) its
	// rollback, its rejected tweak and its fix in the memory.
	rep := call(true)
	if rep.Improvement == nil {
		t.Fatal("no change applied")
	}
	capped(t, "Report.Improvement.Reason", rep.Improvement.Reason, "a"+huge)
	for range 5 {
		call(true)
	}
	chs := l.Changes("a")
	if len(chs) != 1 || chs[0].State != ChangeRolledBack {
		t.Fatalf("changes = %+v, want one rolled back", chs)
	}
	capped(t, "Change.Reason", chs[0].Reason, "a"+huge)
	capped(t, "Change.Verdict", chs[0].Verdict, "")

	// The reviewed tweak, filed as a proposal; the analysis shows the
	// rejected tweak.
	call(true)
	mu.Lock()
	if len(rejected) != 1 {
		t.Fatalf("Analysis.Rejected = %d tweaks, want 1", len(rejected))
	}
	capped(t, "Analysis.Rejected[0].Reason", rejected[0].Reason, "a"+huge)
	mu.Unlock()
	checkCappedProposal(t, l, huge)

	// Another reviewed tweak, approved: its change quotes the rationale.
	call(true)
	approveCappedProposal(t, l, huge)

	// The failure memory: the rolled-back change, the rejected proposal
	// and the approved one, each with its reason cut.
	checkCappedMemory(t, l, unavailable.Error(), huge)
}

// hugeTextStrategy is a strategy (user code) that returns texts of huge,
// and stuffs the analysis's examples with it: its first tweak is applied,
// the others are for review. Under mu, it sets *rejected to the
// analysis's rejected tweaks.
func hugeTextStrategy(huge string, mu *sync.Mutex, rejected *[]Tweak) StrategyFunc {
	var step int
	return StrategyFunc(func(_ context.Context, a Analysis) (*Tweak, error) {
		mu.Lock()
		defer mu.Unlock()
		step++
		*rejected = slices.Clone(a.Rejected)
		next := a.Config
		next.Timeout = time.Duration(step) * time.Second
		switch step {
		case 1: // applied, then rolled back
			return &Tweak{Config: next, Reason: "a" + huge}, nil
		default: // for review: rejected, then approved
			a.Clusters[0].Signature = huge
			a.Clusters[0].Examples = []string{huge, huge, huge, huge}
			return &Tweak{Config: next, Review: true, Reason: "r" + huge, Rule: "u" + huge, Cluster: a.Clusters[0].ID}, nil
		}
	})
}

// checkCappedProposal checks the texts of l's only proposal, filed from
// hugeTextStrategy's texts, then rejects it with a huge note and checks
// the note.
func checkCappedProposal(t *testing.T, l *Loop, huge string) {
	t.Helper()
	ps := l.Proposals(nil)
	if len(ps) != 1 {
		t.Fatalf("%d proposals, want 1", len(ps))
	}
	p := ps[0]
	capped(t, "Proposal.Rationale", p.Rationale, "r"+huge)
	capped(t, "Proposal.Rule", p.Rule, "u"+huge)
	capped(t, "Proposal.Signature", p.Signature, huge)
	if len(p.Examples) != maxExample {
		t.Errorf("%d examples, want %d", len(p.Examples), maxExample)
	}
	for i, e := range p.Examples {
		if len(e) > failure.MaxText || !strings.HasSuffix(e, "…") || !utf8.ValidString(e) {
			t.Errorf("example %d: %d bytes, want at most %d, cut with \"…\"", i, len(e), failure.MaxText)
		}
	}
	if err := l.Reject(p.ID, "n"+huge); err != nil {
		t.Fatal(err)
	}
	ps = l.Proposals(nil)
	if len(ps) != 1 {
		t.Fatalf("%d proposals, want 1", len(ps))
	}
	capped(t, "Proposal.Note", ps[0].Note, "n"+huge)
}

// approveCappedProposal approves l's pending proposal, filed from
// hugeTextStrategy's texts, and checks that its change quotes the
// rationale, cut.
func approveCappedProposal(t *testing.T, l *Loop, huge string) {
	t.Helper()
	ps := l.Proposals(func(p Proposal) bool { return p.Status == ProposalPending })
	if len(ps) != 1 {
		t.Fatalf("%d pending proposals, want 1", len(ps))
	}
	if err := l.Approve(ps[0].ID); err != nil {
		t.Fatal(err)
	}
	chs := l.Changes("a")
	if len(chs) != 2 || !strings.HasPrefix(chs[1].Reason, "approved proposal: r€") {
		t.Fatalf("changes = %+v, want the approved one last", chs)
	}
	capped(t, "approved Change.Reason", chs[1].Reason, "approved proposal: r"+huge)
}

// checkCappedMemory checks the fixes in l's failure memory for failures
// like text, recorded from hugeTextStrategy's texts, and that the memory
// cuts a huge reason whoever records it.
func checkCappedMemory(t *testing.T, l *Loop, text, huge string) {
	t.Helper()
	ms := l.Similar(text, 1)
	if len(ms) != 1 || len(ms[0].Fixes) != 3 {
		t.Fatalf("Similar = %+v, want one cluster with 3 fixes", ms)
	}
	full := map[FixOutcome]string{FixRolledBack: "a" + huge, FixRejected: "r" + huge, FixVerifying: "approved proposal: r" + huge}
	for i, f := range ms[0].Fixes {
		capped(t, fmt.Sprintf("Fix %d (%s).Reason", i, f.State), f.Reason, full[f.State])
	}
	var doc bytes.Buffer
	if err := l.ExportMemory(&doc); err != nil {
		t.Fatal(err)
	}
	if n, where := longestString(t, doc.Bytes()); n > maxReason {
		t.Errorf("ExportMemory: %s is %d bytes", where, n)
	}

	// Defence in depth: the memory cuts a fix's reason whoever records it.
	l.mem.addFix(ms[0].Cluster, Fix{AgentID: "a", ChangeID: "x", Reason: huge, State: FixConfirmed})
	ms = l.Similar(text, 1)
	if len(ms) != 1 || len(ms[0].Fixes) != 4 {
		t.Fatalf("Similar = %+v, want one cluster with 4 fixes", ms)
	}
	capped(t, "Fix added directly", ms[0].Fixes[3].Reason, huge)
}
