package selfimprove_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
)

// agentFiles lists the files in dir/agents.
func agentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// readEvents parses dir/events.jsonl.
func readEvents(t *testing.T, dir string) []si.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []si.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e si.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func TestRestartCarriesOn(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b", Timeout: time.Second}}}
	e := newEnv(t, si.WithStrategy(strat))
	e.calls("x", 3, nil, time.Millisecond)
	applyTweak(t, e, "a")
	e.calls("a", 4, nil, time.Millisecond) // 4 of 10 verification calls
	e.l.MarkCritical("c", true)
	e.l.SetThreshold("m", si.Threshold{Failures: 7, Window: time.Hour, Cooldown: time.Minute})
	beforeStats := e.l.Stats("x")
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}

	e.open(si.WithStrategy(strat))
	if got := e.l.Config("a"); got.Version != 2 || got.Route != "b" || got.Timeout != time.Second {
		t.Fatalf("config after restart = %+v", got)
	}
	if got := e.l.Stats("x"); got != beforeStats {
		t.Errorf("stats after restart = %+v, want %+v", got, beforeStats)
	}
	if _, p := e.l.Threshold("c"); p != si.ProfileCritical {
		t.Errorf("critical mark lost: %s", p)
	}
	if th, _ := e.l.Threshold("m"); th.Failures != 7 || th.Window != time.Hour || th.Cooldown != time.Minute {
		t.Errorf("manual threshold lost: %+v", th)
	}
	// Verification continues where it stopped: 6 more calls confirm.
	for i := range 6 {
		rep := e.call("a", nil, time.Millisecond)
		if (rep.Confirmed != nil) != (i == 5) {
			t.Fatalf("call %d after restart: %+v", i+1, rep)
		}
	}
	// Cooldown survives too: the agent is still cooling down (12h).
	e.call("a", errBoom, 0)
	if rep := e.call("a", errBoom, 0); rep.ImprovementTriggered {
		t.Error("cooldown lost across restart")
	}
}

func TestRejectedSurvivesRestart(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}, {Route: "bad"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	e.calls("a", 5, errBoom, 0)
	e.l.Close()
	e.open(si.WithStrategy(strat))
	e.clk.Advance(13 * time.Hour)
	e.call("a", errBoom, 0)
	if rep := e.call("a", errBoom, 0); !errors.Is(rep.LoopErr, si.ErrTweakRejected) {
		t.Fatalf("rejected tweak after restart: %+v", rep)
	}
}

func TestDecisionsAreDurableBeforeReturn(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat), si.WithFlushInterval(0))
	ch := applyTweak(t, e, "a")
	// Without Close: the state file and the event log already say so.
	files := agentFiles(t, e.dir)
	if len(files) != 1 {
		t.Fatalf("files = %v", files)
	}
	data, err := os.ReadFile(filepath.Join(e.dir, "agents", files[0]))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Config    si.Config  `json:"config"`
		Verifying *si.Change `json:"verifying"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Config.Version != 2 || st.Verifying == nil || st.Verifying.ID != ch.ID {
		t.Fatalf("state on disk = %s", data)
	}
	evs := readEvents(t, e.dir)
	if len(evs) != 1 || evs[0].Type != si.EventImprovementApplied || evs[0].Change.ID != ch.ID || evs[0].Time.Location() != time.UTC {
		t.Fatalf("events = %+v", evs)
	}
	rep := e.call("a", errBoom, 0)
	for range 4 {
		rep = e.call("a", errBoom, 0)
	}
	if rep.Rollback == nil {
		t.Fatal("no rollback")
	}
	evs = readEvents(t, e.dir)
	if len(evs) != 2 || evs[1].Type != si.EventRolledBack || evs[0].ID == evs[1].ID {
		t.Fatalf("events = %+v", evs)
	}
}

func TestHostileAgentIDs(t *testing.T) {
	ids := []string{
		"../x", "../../etc/passwd", "a/b", `a\b`, ".", "..", "CON", "nul",
		"a\x00b", "\xff\xfe\xfd", "日本語のエージェント", strings.Repeat("x", si.MaxAgentIDLen),
		"UPPER", "upper", "agent.json", " ", "\n",
	}
	e := newEnv(t)
	for i, id := range ids {
		e.call(id, nil, 0)
		if err := e.l.SetConfig(id, si.Config{Params: map[string]string{"i": string(rune('A' + i))}}); err != nil {
			t.Fatalf("SetConfig(%q): %v", id, err)
		}
	}
	e.l.Close()
	// Nothing was written outside the directory's own files.
	root, _ := os.ReadDir(e.dir)
	for _, f := range root {
		if f.Name() != "agents" && f.Name() != "events.jsonl" && f.Name() != ".lock" && f.Name() != "call-id-key.json" {
			t.Errorf("unexpected file %q in the state directory", f.Name())
		}
	}
	files := agentFiles(t, e.dir)
	if len(files) != len(ids) {
		t.Errorf("%d files for %d distinct IDs: %q", len(files), len(ids), files)
	}
	for _, f := range files {
		if len(f) > 80 || strings.ContainsAny(f, `/\`+"\x00") || strings.HasPrefix(f, ".") || !strings.HasSuffix(f, ".json") {
			t.Errorf("unsafe file name %q", f)
		}
	}
	// Each ID reads back its own state, exactly.
	e.open()
	for i, id := range ids {
		if got := e.l.Config(id).Params["i"]; got != string(rune('A'+i)) {
			t.Errorf("agent %q: param %q, want %q", id, got, string(rune('A'+i)))
		}
	}
}

func TestCorruptStateMovedAside(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":  `{"format":1,"agent_id":"a","conf`,
		"wrong type": `{"format":"one"}`,
		"nul bytes":  "\x00\x00\x00",
		"empty":      "",
		"bad ring":   ``, // replaced below with a valid file whose ring position is out of range
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.l.SetConfig("a", si.Config{Route: "r"})
			e.l.Close()
			file := filepath.Join(e.dir, "agents", agentFiles(t, e.dir)[0])
			if name == "bad ring" {
				data, _ := os.ReadFile(file)
				content = strings.Replace(string(data), `"calls":{`, `"calls":{"ring_pos":{"failures":200},`, 1)
			}
			if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			e.open()
			rep := e.call("a", nil, 0)
			if !errors.Is(rep.LoopErr, si.ErrCorruptState) || !rep.Success {
				t.Fatalf("report = %+v", rep)
			}
			if got := e.l.Config("a"); got.Version != 1 || got.Route != "" {
				t.Errorf("config = %+v, want a fresh agent", got)
			}
			files := agentFiles(t, e.dir)
			aside := 0
			for _, f := range files {
				if strings.Contains(f, ".corrupt-") {
					aside++
					data, _ := os.ReadFile(filepath.Join(e.dir, "agents", f))
					if string(data) != content {
						t.Error("the corrupt file was altered")
					}
				}
			}
			if aside != 1 {
				t.Errorf("files = %q, want the corrupt one kept aside", files)
			}
		})
	}
}

func TestStateOfAnotherAgentIsRejected(t *testing.T) {
	e := newEnv(t)
	e.l.SetConfig("a", si.Config{Route: "a's"})
	e.call("b", nil, 0)
	e.l.Close()
	// Put a's state under b's name: b must not adopt it.
	files := agentFiles(t, e.dir)
	var fa, fb string
	for _, f := range files {
		if strings.HasPrefix(f, "a_") {
			fa = f
		} else {
			fb = f
		}
	}
	data, _ := os.ReadFile(filepath.Join(e.dir, "agents", fa))
	os.WriteFile(filepath.Join(e.dir, "agents", fb), data, 0o600)
	e.open()
	rep := e.call("b", nil, 0)
	if !errors.Is(rep.LoopErr, si.ErrCorruptState) || e.l.Config("b").Route != "" {
		t.Fatalf("b adopted a's state: %+v, %+v", rep, e.l.Config("b"))
	}
}

func TestNoTemporaryFilesLeft(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	e.calls("a", 10, nil, 0)
	for i := range 20 {
		e.l.SetConfig("a", si.Config{MaxAttempts: i % 3})
	}
	e.l.Close()
	for _, f := range agentFiles(t, e.dir) {
		if strings.Contains(f, ".tmp") {
			t.Errorf("temporary file %q left behind", f)
		}
	}
}

func TestWindowCountsFlushedPeriodically(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l, err := si.New(si.WithDir(dir), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for range 7 {
			l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
		}
		if files := agentFiles(t, dir); len(files) != 0 {
			t.Fatalf("saved before the flush interval: %v", files)
		}
		time.Sleep(10*time.Second + time.Millisecond) // fake time inside the bubble
		synctest.Wait()
		files := agentFiles(t, dir)
		if len(files) != 1 {
			t.Fatalf("files after the flush interval: %v", files)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "agents", files[0]))
		if !strings.Contains(string(data), `"total":7`) {
			t.Errorf("state = %s, want 7 calls", data)
		}
	})
}

func TestEventsLoggedInOrderUnderConcurrency(t *testing.T) {
	strat := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		return &si.Tweak{Config: si.Config{Route: fmt.Sprint("r", a.Config.Version, "-", len(a.Rejected))}, Reason: "harmful"}, nil
	})
	e := newEnv(t, si.WithStrategy(strat))
	if err := e.l.SetThreshold("a", si.Threshold{Failures: 1, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				e.l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return errBoom })
			}
		}()
	}
	wg.Wait()
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, e.dir)
	if len(evs) < 20 {
		t.Fatalf("only %d events", len(evs))
	}
	// Each change is applied, then rolled back, before the next is applied.
	var open string
	for i, ev := range evs {
		switch ev.Type {
		case si.EventImprovementApplied:
			if open != "" {
				t.Fatalf("event %d: change %s applied while %s is open", i, ev.Change.ID, open)
			}
			open = ev.Change.ID
		case si.EventRolledBack:
			if ev.Change.ID != open {
				t.Fatalf("event %d: rollback of %s, but %q is the open change", i, ev.Change.ID, open)
			}
			open = ""
		case si.EventThresholdSet: // the test's own SetThreshold
			evs = append(evs[:i:i], evs[i+1:]...)
		default:
			t.Fatalf("event %d: unexpected %s", i, ev.Type)
		}
	}
	if m := e.l.Metrics(); int(m.Improvements+m.Rollbacks) != len(evs) {
		t.Errorf("metrics %+v, %d events", m, len(evs))
	}
}

// breakAgentsDir makes every state write fail (the agents directory becomes
// a file) and returns a function that repairs it.
func breakAgentsDir(t *testing.T, dir string) (repair func()) {
	t.Helper()
	agents := filepath.Join(dir, "agents")
	moved := filepath.Join(dir, "agents.moved")
	if err := os.Rename(agents, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agents, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		os.Remove(agents)
		if err := os.Rename(moved, agents); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChangeNotMadeWhenItCannotBeSaved(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}, {Route: "b"}}}
	e := newEnv(t, si.WithStrategy(strat))
	e.call("a", errBoom, 0)
	repair := breakAgentsDir(t, e.dir)
	rep := e.call("a", errBoom, 0) // fn's error comes back unchanged (checked by call)
	if !rep.ImprovementTriggered || rep.Improvement != nil || rep.LoopErr == nil {
		t.Fatalf("report = %+v", rep)
	}
	if got := e.l.Config("a"); got.Version != 1 || got.Route != "" {
		t.Fatalf("config = %+v: a change that could not be saved was made", got)
	}
	if m := e.l.Metrics(); m.StoreErrors == 0 || m.Improvements != 0 {
		t.Errorf("metrics = %+v", m)
	}
	repair()
	if err := e.l.Close(); err != nil {
		t.Fatalf("Close after repair: %v", err)
	}
	if evs := readEvents(t, e.dir); len(evs) != 0 {
		t.Errorf("events = %+v, want none for a change not made", evs)
	}
}

func TestRollbackStandsWhenItCannotBeSaved(t *testing.T) {
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "bad"}}}
	e := newEnv(t, si.WithStrategy(strat))
	applyTweak(t, e, "a")
	e.calls("a", 4, errBoom, 0)
	repair := breakAgentsDir(t, e.dir)
	rep := e.call("a", errBoom, 0)
	if rep.Rollback == nil || rep.LoopErr == nil {
		t.Fatalf("report = %+v", rep)
	}
	if got := e.l.Config("a"); got.Version != 1 {
		t.Fatalf("config = %+v, want the rollback in force", got)
	}
	repair()
	// rollback_failed at once; rolled_back at the next save, which Close
	// makes: wait for the first two, so that none is in Close's digest.
	e.rec.waitFor(t, 2)
	if err := e.l.Close(); err != nil {
		t.Fatalf("Close after repair: %v", err)
	}
	// The rollback's event was kept and logged once the disk came back.
	got := e.rec.types()
	want := []si.EventType{si.EventImprovementApplied, si.EventRollbackFailed, si.EventRolledBack}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
	var logged []si.EventType
	for _, ev := range readEvents(t, e.dir) {
		logged = append(logged, ev.Type)
	}
	want = []si.EventType{si.EventImprovementApplied, si.EventRolledBack, si.EventRollbackFailed}
	if diff := cmp.Diff(want, logged); diff != "" {
		t.Errorf("logged (-want +got):\n%s", diff)
	}
	e.open()
	if got := e.l.Config("a"); got.Version != 1 {
		t.Errorf("after restart: config v%d, want v1", got.Version)
	}
}

func TestCloseReportsStoreErrors(t *testing.T) {
	e := newEnv(t)
	e.call("a", nil, 0)
	repair := breakAgentsDir(t, e.dir)
	defer repair()
	if err := e.l.Close(); err == nil {
		t.Fatal("Close hid a failed save")
	}
}

func TestOperatorActionsAreLogged(t *testing.T) {
	e := newEnv(t)
	e.l.SetConfig("a", si.Config{Route: "r"})
	e.l.SetThreshold("a", si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute})
	e.l.SetThreshold("a", si.Threshold{})
	e.l.MarkCritical("a", true)
	e.l.ClearRejected("a")
	// On disk before Close.
	var got []si.EventType
	for _, ev := range readEvents(t, e.dir) {
		if ev.AgentID != "a" || ev.ID == "" || ev.Message == "" || ev.Time.Location() != time.UTC {
			t.Errorf("event %+v", ev)
		}
		got = append(got, ev.Type)
	}
	want := []si.EventType{si.EventConfigSet, si.EventThresholdSet, si.EventThresholdSet, si.EventCriticalSet, si.EventRejectedCleared}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("logged (-want +got):\n%s", diff)
	}
}
