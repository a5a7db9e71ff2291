package selfimprove_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"

	si "github.com/self-improving-loop/selfimprove"
)

// memCorpus are the errors remembered in the ranking test, one cluster
// each, and paraphrases of them with other IDs and numbers.
var memCorpus = []struct{ stored, query string }{
	{`openai: 429 Too Many Requests: {"error":{"message":"Rate limit reached for gpt-4o in organization org-AbC123 on tokens per min (TPM): Limit 30000, Used 29750, Requested 1200.","type":"tokens"}}`,
		`openai: 429 Too Many Requests: {"error":{"message":"Rate limit reached for gpt-4o in organization org-ZZZ999 on tokens per min (TPM): Limit 90000, Used 89000, Requested 3100.","type":"tokens"}}`},
	{`Post "https://api.search.example/v1/query?id=77": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`,
		`Post "https://api.search.example/v1/query?id=9182": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`},
	{`anthropic: 529 overloaded_error: Overloaded`, `anthropic: 529 overloaded_error: Overloaded (request req_01HZX)`},
	{`model "claude-2.0" has been deprecated and is no longer available`, `model "claude-2.1" has been deprecated and is no longer available`},
	{`invalid_request_error: This model's maximum context length is 8192 tokens. However, your messages resulted in 9021 tokens.`,
		`invalid_request_error: This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.`},
	{`dial tcp 10.0.3.7:5432: connect: connection refused`, `dial tcp 10.0.9.21:5432: connect: connection refused`},
	{`tool "calendar.create_event" failed: invalid attendee email "bob@"`, `tool "calendar.create_event" failed: invalid attendee email "alice.example"`},
	{`401 Unauthorized: invalid api key sk-live-abc`, `401 Unauthorized: invalid api key sk-test-xyz`},
	{`empty response from model: finish_reason=length`, `empty response from model: finish_reason=length, 0 choices`},
	{`content_filter: the response was filtered due to the prompt triggering Azure OpenAI's content management policy`,
		`content_filter: the response was filtered due to the prompt triggering Azure OpenAI's content management policy (code 400)`},
}

// fail makes agent id fail once with msg.
func (e *env) fail(id, msg string) si.Report {
	e.t.Helper()
	rep, _ := e.l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error {
		e.clk.Advance(time.Millisecond)
		return errors.New(msg)
	})
	return rep
}

func TestSimilarRanksParaphrasesFirst(t *testing.T) {
	e := newEnv(t)
	for i, c := range memCorpus {
		e.fail(fmt.Sprintf("agent-%d", i%3), c.stored)
	}
	for i, c := range memCorpus {
		got := e.l.Similar(c.query, 3)
		if len(got) == 0 || got[0].Signature != failure.Signature(c.stored) {
			t.Errorf("query %d %q: got %+v, want the cluster of %q first", i, c.query, got, failure.Signature(c.stored))
			continue
		}
		if got[0].Similarity < 0.6 || got[0].Confidence > got[0].Similarity || got[0].Confidence < got[0].Similarity-0.001 {
			t.Errorf("query %d: similarity %.2f, confidence %.2f", i, got[0].Similarity, got[0].Confidence)
		}
		for j := 1; j < len(got); j++ {
			if got[j].Similarity > got[j-1].Similarity {
				t.Errorf("query %d: not ranked: %v", i, got)
			}
		}
	}
	if got := e.l.Similar("completely unrelated words here", 3); len(got) != 0 {
		t.Errorf("unrelated query matched %+v", got)
	}
	if got := e.l.Similar(memCorpus[0].query, 0); got != nil {
		t.Errorf("k=0 returned %v", got)
	}
}

func TestSimilarConfidenceDecays(t *testing.T) {
	e := newEnv(t, si.WithMemory(si.MemoryOptions{HalfLife: time.Hour}))
	e.fail("a", memCorpus[0].stored)
	e.clk.Advance(2 * time.Hour)
	got := e.l.Similar(memCorpus[0].stored, 1)
	if len(got) != 1 || got[0].Similarity < 0.999 {
		t.Fatalf("got %+v", got)
	}
	// Seen 2h + 1ms ago: a quarter, to within the millisecond.
	if c := got[0].Confidence; c < 0.2499 || c > 0.25 {
		t.Errorf("confidence after two half-lives = %v, want 0.25", c)
	}
}

func TestMemoryBounded(t *testing.T) {
	e := newEnv(t, si.WithMemory(si.MemoryOptions{MaxClusters: 128}))
	for i := range 1000 {
		e.fail("a", fmt.Sprintf("failure kind%c%c%c", 'a'+i%26, 'a'+i/26%26, 'a'+i/676%26))
		e.clk.Advance(time.Second)
	}
	var buf bytes.Buffer
	if err := e.l.ExportMemory(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Memories []si.Memory }
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if n := len(doc.Memories); n > 128 || n < 100 {
		t.Fatalf("%d clusters kept, want at most 128 and most of them", n)
	}
	// The latest are kept, the oldest evicted.
	if got := doc.Memories[0].Signature; got != failure.Signature("failure kindlmb") {
		t.Errorf("latest kept = %q", got)
	}
	for _, m := range doc.Memories {
		if m.LastSeen.Before(t0.Add(800 * time.Second)) {
			t.Errorf("an old cluster was kept: %+v", m)
			break
		}
	}
}

func TestMemoryKeepsConfirmedFixesLonger(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithMemory(si.MemoryOptions{MaxClusters: 64, HalfLife: 24 * time.Hour}))
	e.fail("a", "upstream broke: code red")
	e.fail("a", "upstream broke: code red")
	e.calls("a", 10, nil, time.Millisecond) // confirms the fix
	for i := range 200 {
		e.clk.Advance(time.Second)
		e.fail("b", fmt.Sprintf("noise %c%c", 'a'+i%26, 'a'+i/26))
	}
	got := e.l.Similar("upstream broke: code red", 1)
	if len(got) != 1 || len(got[0].Fixes) != 1 || got[0].Fixes[0].State != si.FixConfirmed {
		t.Fatalf("the cluster with a confirmed fix was evicted: %+v", got)
	}
}

func TestMemoryRecordsFixesAndSurvivesRestart(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}, {Route: "good"}}}
	e := newEnv(t, si.WithStrategy(strat))
	msg := "upstream: 503 service unavailable"
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	e.fail("a", msg)
	if rep := e.fail("a", msg); rep.Improvement == nil || rep.Improvement.Cluster != failure.ClusterID(failure.Signature(msg)) {
		t.Fatalf("improvement %+v", rep.Improvement)
	}
	for range 5 {
		e.fail("a", msg) // rolls "bad" back
	}
	e.clk.Advance(2 * time.Minute)
	e.fail("a", msg)
	if rep := e.fail("a", msg); rep.Improvement == nil {
		t.Fatal("no second improvement")
	}
	e.calls("a", 10, nil, time.Millisecond) // confirms "good"

	want := []si.FixOutcome{si.FixRolledBack, si.FixConfirmed}
	check := func(when string) {
		t.Helper()
		got := e.l.Similar(msg, 1)
		if len(got) != 1 || len(got[0].Fixes) != 2 {
			t.Fatalf("%s: %+v", when, got)
		}
		for i, f := range got[0].Fixes {
			if f.State != want[i] || f.AgentID != "a" || f.ChangeID == "" {
				t.Errorf("%s: fix %d = %+v, want %s", when, i, f, want[i])
			}
		}
		if got[0].Fixes[1].To.Route != "good" || got[0].Count != 9 || got[0].Class != failure.ClassOverloaded {
			t.Errorf("%s: %+v", when, got[0])
		}
	}
	check("before the restart")
	e.l.Close()
	e.open()
	check("after the restart")
}

// learnEnv is a loop whose strategy gives agent "a" the fixed tweak
// aFix, and runs the built-in strategy for every other agent.
func learnEnv(t *testing.T, aFix si.Config) *env {
	builtin := &si.BuiltinStrategy{}
	strat := si.StrategyFunc(func(ctx context.Context, an si.Analysis) (*si.Tweak, error) {
		if an.AgentID == "a" {
			return &si.Tweak{Config: aFix, Reason: "operator's guess"}, nil
		}
		return builtin.Analyze(ctx, an)
	})
	e := newEnv(t, si.WithStrategy(strat), si.WithDefaultConfig(si.Config{Timeout: time.Second}))
	for _, id := range []string{"a", "b"} {
		if err := e.l.SetThreshold(id, si.Threshold{Failures: 2, Window: time.Hour, Cooldown: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestStrategyLearnsFromAnotherAgent(t *testing.T) {
	// Agent a times out; its fix, a 4s timeout, is confirmed.
	e := learnEnv(t, si.Config{Timeout: 4 * time.Second})
	e.fail("a", `Post "https://llm.example/v1/chat?req=1": context deadline exceeded`)
	e.fail("a", `Post "https://llm.example/v1/chat?req=2": context deadline exceeded`)
	e.calls("a", 10, nil, time.Millisecond)
	// Agent b times out on a similar call. Alone, the built-in strategy
	// would raise its timeout 1s → 1.5s; it takes the learned 4s.
	e.fail("b", `Post "https://llm.example/v1/chat?req=77": context deadline exceeded`)
	rep := e.fail("b", `Post "https://llm.example/v1/chat?req=78": context deadline exceeded`)
	if rep.Improvement == nil || rep.Improvement.To.Timeout != 4*time.Second || !strings.Contains(rep.Improvement.Reason, `learned`) {
		t.Fatalf("improvement on b = %+v", rep.Improvement)
	}
}

func TestStrategyAvoidsWhatFailedElsewhere(t *testing.T) {
	// Agent a's fix, the built-in's own move (1s → 1.5s), is rolled back.
	e := learnEnv(t, si.Config{Timeout: 1500 * time.Millisecond})
	msg := `Post "https://llm.example/v1/chat?req=1": context deadline exceeded`
	for range 7 {
		e.fail("a", msg)
	}
	if chs := e.l.Changes("a"); len(chs) != 1 || chs[0].State != si.ChangeRolledBack {
		t.Fatalf("changes of a: %+v", chs)
	}
	// Agent b fails alike: the same move is filed for review, not applied.
	e.fail("b", msg)
	rep := e.fail("b", msg)
	if rep.Improvement != nil {
		t.Fatalf("applied %+v", rep.Improvement)
	}
	ps := e.l.Proposals(nil)
	if len(ps) != 1 || ps[0].AgentID != "b" || !strings.Contains(ps[0].Rationale, "rolled back for a similar failure") {
		t.Fatalf("proposals: %+v", ps)
	}
}

func TestCorruptMemoryStartsAfresh(t *testing.T) {
	e := newEnv(t)
	e.fail("a", "upstream: 503 service unavailable")
	e.l.Close()
	if err := os.WriteFile(filepath.Join(e.dir, "memory.json"), []byte(`{"format":1,"memories":[{`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open()
	if got := e.l.Similar("upstream: 503 service unavailable", 1); len(got) != 0 {
		t.Fatalf("corrupt memory read as %+v", got)
	}
	if e.l.Metrics().StoreErrors == 0 {
		t.Error("a corrupt memory was not counted")
	}
	// It is replaced at the next save.
	e.fail("a", "upstream: 503 service unavailable")
	e.l.Close()
	e.open()
	if got := e.l.Similar("upstream: 503 service unavailable", 1); len(got) != 1 || got[0].Count != 1 {
		t.Fatalf("after the next save: %+v", got)
	}
}
