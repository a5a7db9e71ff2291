package selfimprove

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/failure"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"", ".", "..", "../x", "a/b", `a\b`, "a\x00b", "\xff", "Agent-1", strings.Repeat("z", 100)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na := fileName(a)
		if !filepath.IsLocal(na) || filepath.Base(na) != na || strings.ContainsAny(na, "/\\\x00:") ||
			strings.HasPrefix(na, ".") || !strings.HasSuffix(na, ".json") || len(na) > 78 || strings.Count(na, ".") != 1 {
			t.Fatalf("fileName(%q) = %q: unsafe", a, na)
		}
		if fileName(a) != na {
			t.Fatal("not deterministic")
		}
		if a != b && na == fileName(b) {
			t.Fatalf("fileName(%q) == fileName(%q) = %q", a, b, na)
		}
		st := newState(a, Config{})
		if err := st.check(a); err != nil {
			t.Fatalf("the state of agent %q does not check as its own: %v", a, err)
		}
		if b != a && st.check(b) == nil {
			t.Fatalf("the state of agent %q checks as agent %q's", a, b)
		}
	})
}

func FuzzConfigJSON(f *testing.F) {
	f.Add([]byte(`{"version":3,"timeout":"1.5s","max_attempts":3,"backoff":"200ms","route":"gpt","params":{"k":"v"}}`))
	f.Add([]byte(`{"timeout":1500000000,"backoff":null}`))
	f.Add([]byte(`{"timeout":"-1h"}`))
	f.Add([]byte(`{"timeout":"1x"}`))
	f.Add([]byte(`{"params":{"\xff":"\u0000"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if json.Unmarshal(data, &c) != nil {
			return
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", c, err)
		}
		var back Config
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", out, err)
		}
		// JSON carries valid UTF-8 only: compare after the same repair.
		want := c
		want.Route = strings.ToValidUTF8(c.Route, "\uFFFD")
		if c.Params != nil {
			want.Params = map[string]string{}
			for k, v := range c.Params {
				want.Params[strings.ToValidUTF8(k, "\uFFFD")] = strings.ToValidUTF8(v, "\uFFFD")
			}
		}
		if !back.Equal(want) || back.Version != c.Version || (utf8.ValidString(c.Route) && back.Route != c.Route) {
			t.Fatalf("round trip: %+v -> %s -> %+v", c, out, back)
		}
	})
}

// FuzzStateFile feeds arbitrary state files to decodeState. Whatever it
// accepts must encode, decode back to an equal state, and encode again to
// the same bytes; then the loop uses it: nothing may panic or hang.
func FuzzStateFile(f *testing.F) {
	st := newState("a", Config{Version: 1, Route: "r"})
	st.Tracker.record(1, int64(time.Hour), time.Millisecond, true, 1, "boom", 0)
	v1, _ := json.Marshal(st) // the in-memory layout is format 1
	f.Add(v1)
	f.Add([]byte(strings.Replace(string(v1), `"head":`, `"head":9223372036854775`, 1)))
	f.Add([]byte(strings.Replace(string(v1), `"width_ns":`, `"width_ns":1`, 1)))
	f.Add([]byte(`{"format":1,"agent_id_b64":"YQ==","tracker":{"window":{"width_ns":1000000000,"head":-5}}}`))
	f.Add([]byte(`{}`))
	v2, err := encodeState(&st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v2)
	f.Add([]byte(`{"format":2,"agent_id_b64":"YQ==","max_version":1,"config":{"version":1},"calls":{"window":{"bucket_ns":1000000000,"newest":"1970-01-01T00:00:00Z"},"last_24h":{"bucket_ns":900000000000,"newest":"1970-01-01T00:00:00Z"}}}`))
	// The golden files, as agent "a"'s.
	for _, name := range []string{"state-v1.json", "state-v1-as-v2.json", "state-v1-circuit.json", "state-v1-circuit-as-v2.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(regexp.MustCompile(`"agent_id_b64":"[^"]*"`).ReplaceAll(data, []byte(`"agent_id_b64":"YQ=="`)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeState(data, "a")
		if err != nil {
			return
		}
		enc, err := encodeState(&st)
		if err != nil {
			t.Fatalf("an accepted state does not encode: %v", err)
		}
		back, err := decodeState(enc, "a")
		if err != nil {
			t.Fatalf("an encoded state does not decode: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(st, back, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(agentState{}, streak{}, routeState{})); diff != "" {
			t.Fatalf("round trip (-decoded +re-decoded):\n%s", diff)
		}
		if again, err := encodeState(&back); err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("encode→decode→encode differs (%v):\n%s\n%s", err, enc, again)
		}
		now := int64(1_700_000_000) * int64(time.Second)
		tr := &st.Tracker
		tr.record(st.Gen, now, time.Millisecond, true, 1, "x", 0)
		tr.stats(now)
		tr.health(now)
		tr.failuresOf(st.Gen, now-int64(time.Hour))
		tr.consecutiveOf(st.Gen)
		tr.regime(0, maxBeforeCalls)
		tr.recentFailures(0, func(uint32) (failure.Class, string) { return "", "" })
		tr.Win.resize(slotWidth(time.Hour))
		tr.Win.resize(slotWidth(72 * time.Hour))
		st.clustersLocked(now, st.Tracker.Win.Width)
		encodeState(&st) // may refuse, never panic
	})
}

// FuzzTraceJSON checks the hand-written trace encoder against encoding/json,
// and that ReadTraces reads the agent ID back exactly.
func FuzzTraceJSON(f *testing.F) {
	f.Add("bot-\xff\xfe", "", int64(1_700_000_000_000000000), int64(0), 1, 1)
	f.Add("agent-1", "boom", int64(1_700_000_000_123456789), int64(1500), 2, 3)
	f.Add("a\"b\\c\n\t\x00\x1f", "\xff\xfe<>&\u2028\u2029é", int64(0), int64(-1), 0, -5)
	f.Add("", "", int64(-62135596800), int64(1<<62), 1<<40, 1)
	f.Add("x", "y", int64(1_700_000_000_000000000), int64(0), 1, 1)
	f.Add("x", "y", int64(1_700_000_000_120000000), int64(0), 1, 1)
	f.Fuzz(func(t *testing.T, agent, errText string, unixNano, dur int64, attempts, version int) {
		tr := Trace{Time: time.Unix(0, unixNano).In(time.FixedZone("X", 3600)), AgentID: agent, Version: version,
			Outcome: OutcomeFailure, Duration: time.Duration(dur), Attempts: attempts, Err: errText}
		var enc traceEncoder
		got := enc.appendJSON(nil, &tr)
		// Again, with the second cached from a first trace.
		if again := enc.appendJSON(nil, &tr); string(again) != string(got) {
			t.Fatalf("second encoding differs:\n%s\n%s", got, again)
		}
		want, err := marshalLines([]traceLine{{Trace: Trace{Time: tr.Time.UTC(), AgentID: agent, Version: version,
			Outcome: OutcomeFailure, Duration: tr.Duration, Attempts: attempts, Err: errText}, AgentIDB64: logIDB64(agent)}})
		if err != nil {
			return // a time encoding/json refuses (year outside 0..9999)
		}
		if string(got) != string(want) {
			t.Fatalf("appendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
		var back []string
		ReadTraces(bytes.NewReader(got), func(tr Trace) error { back = append(back, tr.AgentID); return nil })
		if checkAgentID(agent) == nil || utf8.ValidString(agent) { // an ID the loop may trace
			if len(back) != 1 || back[0] != agent {
				t.Fatalf("agent %q read back as %q from\n%s", agent, back, got)
			}
		}
	})
}

// FuzzMemory remembers two texts, evicting under a bound of 2, and checks
// that Similar ranks an exact match first, keeps similarities in [0, 1],
// and that a saved memory loads back the same.
func FuzzMemory(f *testing.F) {
	for _, s := range [][3]string{
		{"upstream: 503 service unavailable", "openai: 429 rate limit", "a third one"},
		{"", "<n> <n>", "\xff\xfe"},
		{"timeout after 30s on req 123", "timeout after 45s on req 999", "Timeout"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		m := newMemory(MemoryOptions{MaxClusters: 2})
		for i, s := range []string{a, b, c} {
			sig := []byte(failure.Signature(s))
			m.observe("agent", failure.ClusterOf(sig), sig, failure.ClassOther, int64(i+1))
		}
		if len(m.byID) > 2 {
			t.Fatalf("%d clusters kept under a bound of 2", len(m.byID))
		}
		for _, q := range []string{a, b, c} {
			got := m.similar(q, 3, 10)
			for i, g := range got {
				if !(g.Similarity > 0 && g.Similarity <= 1) || g.Confidence > g.Similarity {
					t.Fatalf("similar(%q)[%d] = %+v", q, i, g)
				}
			}
			if i, ok := m.byID[failure.ClusterOf([]byte(failure.Signature(q)))]; ok && len(got) > 0 && got[0].Similarity < 0.999 {
				t.Fatalf("similar(%q): remembered exactly as %q, but the best is %+v", q, m.entries[i].Signature, got[0])
			}
		}
		data, _, err := m.encode(0, true)
		if err != nil {
			t.Fatal(err)
		}
		m2 := newMemory(MemoryOptions{MaxClusters: 2})
		if err := m2.load(data); err != nil {
			t.Fatal(err)
		}
		if a, b := m.all(), m2.all(); len(a) != len(b) {
			t.Fatalf("saved %d clusters, loaded %d", len(a), len(b))
		}
	})
}

// FuzzConfigCheck: a config the check accepts (SetConfig's, New's,
// a tweak's) is stored as it is: it encodes and decodes back through the
// state format unchanged, as the config in force, a backup, a change's
// and a rejected tweak's.
func FuzzConfigCheck(f *testing.F) {
	f.Add(int64(time.Second), 3, int64(time.Millisecond), "gpt", "k", "v", "\x00<&>", "\u2028", 2)
	f.Add(int64(24*time.Hour), 100, int64(time.Hour), strings.Repeat("é", 128), strings.Repeat("k", 64), strings.Repeat("v", 256), "", "", 1)
	f.Add(int64(-1), -1, int64(-1), "\xff", "\xff", "\xff", "a", "b", 0)
	f.Add(int64(24*time.Hour+1), 101, int64(time.Hour+1), strings.Repeat("r", 257), "k", strings.Repeat("v", 257), "", "", 2)
	f.Fuzz(func(t *testing.T, timeout int64, attempts int, backoff int64, route, k1, v1, k2, v2 string, n int) {
		cfg := Config{Timeout: time.Duration(timeout), MaxAttempts: attempts, Backoff: time.Duration(backoff), Route: route}
		if n%3 != 0 {
			cfg.Params = map[string]string{k1: v1}
			if n%3 == 2 {
				cfg.Params[k2] = v2
			}
		}
		if err := cfg.validate(); err != nil {
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "config.") {
				t.Fatalf("refusal %q does not wrap ErrInvalidConfig naming the field", err)
			}
			return
		}
		at := func(v int) Config { c := cfg.clone(); c.Version = v; return c }
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		st := newState("a", at(3))
		st.History = []Config{at(1), at(2)}
		st.Changes = []Change{{ID: "c", AgentID: "a", From: at(1), To: at(2), AppliedAt: now, DecidedAt: now, State: ChangeRolledBack}}
		st.Rejected = []Tweak{{Config: at(2), Reason: "rolled back"}}
		enc := roundTrip(t, &st)
		back, err := decodeState(enc, "a")
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range []Config{back.Config, back.History[0], back.Changes[0].To, back.Rejected[0].Config} {
			if !got.Equal(cfg) || got.Route != cfg.Route || got.MaxAttempts != cfg.MaxAttempts {
				t.Fatalf("config %d read back as %+v, want %+v", i, got, cfg)
			}
		}
	})
}
