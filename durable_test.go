package selfimprove_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

func TestSecondLoopOnADirectoryIsLocked(t *testing.T) {
	dir := t.TempDir()
	a, err := si.New(si.WithDir(dir), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := si.New(si.WithDir(dir), si.WithLogger(quiet)); !errors.Is(err, si.ErrLocked) {
		t.Fatalf("second New = %v, want ErrLocked", err)
	}
	if _, err := si.OpenFileStore(dir, si.FileOptions{}); !errors.Is(err, si.ErrLocked) {
		t.Fatalf("OpenFileStore = %v, want ErrLocked", err)
	}
	a.Close()
	b, err := si.New(si.WithDir(dir), si.WithLogger(quiet))
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	b.Close()
}

// readTraces parses dir/traces.jsonl.
func readTraces(t *testing.T, dir string) ([]si.Trace, int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []si.Trace
	skipped, err := si.ReadTraces(f, func(tr si.Trace) error { out = append(out, tr); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out, skipped
}

func TestTracesBatched(t *testing.T) {
	e := newEnv(t, si.WithTraces(si.TracesBatched))
	for i := range 100 {
		var err error
		if i%10 == 9 {
			err = errBoom
		}
		e.call(fmt.Sprint("agent-", i%3), err, time.Duration(i)*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.l.ExecuteWithImprovement(ctx, "agent-0", func(ctx context.Context, _ si.Config) error { return ctx.Err() })
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	traces, skipped := readTraces(t, e.dir)
	if len(traces) != 101 || skipped != 0 {
		t.Fatalf("%d traces, %d skipped; want 101", len(traces), skipped)
	}
	counts := map[si.Outcome]int{}
	for i, tr := range traces[:100] {
		counts[tr.Outcome]++
		if tr.Duration != time.Duration(i)*time.Millisecond || tr.AgentID != fmt.Sprint("agent-", i%3) ||
			tr.Attempts != 1 || tr.Version != 1 || tr.Time.Location() != time.UTC {
			t.Fatalf("trace %d = %+v", i, tr)
		}
		if (tr.Outcome == si.OutcomeFailure) != (tr.Err == "boom") {
			t.Fatalf("trace %d: outcome %s, error %q", i, tr.Outcome, tr.Err)
		}
	}
	if counts[si.OutcomeFailure] != 10 || traces[100].Outcome != si.OutcomeIgnored {
		t.Errorf("outcomes = %v, last %s", counts, traces[100].Outcome)
	}
	if m := e.l.Metrics(); m.Traces != 101 || m.TracesDropped != 0 {
		t.Errorf("metrics = %+v", m)
	}
}

func TestTracesSyncAreOnDiskWhenTheCallReturns(t *testing.T) {
	e := newEnv(t, si.WithTraces(si.TracesSync))
	for i := range 20 {
		e.call("a", nil, time.Millisecond)
		if traces, _ := readTraces(t, e.dir); len(traces) != i+1 {
			t.Fatalf("after call %d: %d traces on disk", i+1, len(traces))
		}
	}
}

// gatedStore holds trace appends until its gate opens.
type gatedStore struct {
	*si.RAMStore
	gate chan struct{}
}

func (g *gatedStore) AppendTraces(ts []si.Trace) error {
	<-g.gate
	return g.RAMStore.AppendTraces(ts)
}

func TestFullTraceQueueWaitsThenDropsVisibly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &gatedStore{RAMStore: si.NewRAMStore(), gate: make(chan struct{})}
		l, err := si.New(si.WithStore(st), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0),
			si.WithTraces(si.TracesBatched), si.WithTraceQueue(3, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ok := func(context.Context, si.Config) error { return nil }
		l.ExecuteWithImprovement(context.Background(), "a", ok)
		time.Sleep(200 * time.Millisecond) // the writer takes it and blocks in the store
		synctest.Wait()
		for range 3 { // fills the queue
			if rep, _ := l.ExecuteWithImprovement(context.Background(), "a", ok); rep.LoopErr != nil {
				t.Fatalf("LoopErr %v with room in the queue", rep.LoopErr)
			}
		}
		start := time.Now()
		rep, err := l.ExecuteWithImprovement(context.Background(), "a", ok)
		if err != nil || !rep.Success {
			t.Fatalf("the call itself failed: %+v", rep)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond || !errors.Is(rep.LoopErr, si.ErrTraceDropped) {
			t.Fatalf("waited %v, LoopErr %v; want a 50ms wait, then ErrTraceDropped", waited, rep.LoopErr)
		}
		if m := l.Metrics(); m.TracesDropped != 1 {
			t.Errorf("TracesDropped = %d", m.TracesDropped)
		}
		close(st.gate)
		l.Close()
		if n := len(st.Traces()); n != 4 {
			t.Errorf("%d traces stored, want the 4 not dropped", n)
		}
	})
}

func TestLogRotationThroughTheLoop(t *testing.T) {
	dir := t.TempDir()
	e := newStoreEnv(t, si.WithTraces(si.TracesSync), withFileStore(t, dir, si.FileOptions{MaxLogSize: 4096, KeepArchives: 2}))
	e.dir = dir
	for range 300 {
		e.call("a", nil, 0)
	}
	e.l.Close()
	ents, _ := os.ReadDir(e.dir)
	var gz int
	for _, f := range ents {
		if strings.HasPrefix(f.Name(), "traces-") {
			if !strings.HasSuffix(f.Name(), ".jsonl.gz") {
				t.Errorf("archive %s not compressed", f.Name())
			}
			gz++
		}
	}
	if gz != 2 {
		t.Errorf("%d trace archives, want 2 kept", gz)
	}
}

func TestEvictionLosesNothing(t *testing.T) {
	st := si.NewRAMStore()
	e := newStoreEnv(t, si.WithStore(st), si.WithMaxAgents(20))
	const agents, calls = 200, 15
	for i := range agents {
		e.l.SetConfig(fmt.Sprint("agent-", i), si.Config{Route: fmt.Sprint("route-", i)})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range calls {
				for i := g; i < agents; i += 8 {
					var err error
					if c%5 == 4 {
						err = errBoom
					}
					e.l.ExecuteWithImprovement(context.Background(), fmt.Sprint("agent-", i), func(context.Context, si.Config) error { return err })
				}
			}
		}()
	}
	wg.Wait()
	m := e.l.Metrics()
	if m.Evictions == 0 || m.Loads == 0 {
		t.Fatalf("metrics = %+v, want evictions and reloads", m)
	}
	for i := range agents {
		id := fmt.Sprint("agent-", i)
		if s := e.l.Stats(id); s.TotalCalls != calls || s.Failures != calls/5 {
			t.Fatalf("%s: %d calls, %d failures after evictions; want %d, %d", id, s.TotalCalls, s.Failures, calls, calls/5)
		}
		if c := e.l.Config(id); c.Route != fmt.Sprint("route-", i) || c.Version != 2 {
			t.Fatalf("%s: config %+v", id, c)
		}
	}
}

func TestMillionsOfAgentIDsStayBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithNotifier(nil), si.WithMaxAgents(1000))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		peak := int64(0)
		for i := range 20_000 {
			l.ExecuteWithImprovement(context.Background(), fmt.Sprint("id-", i), func(context.Context, si.Config) error { return nil })
			if i%1000 == 999 {
				synctest.Wait() // let the evictor catch up, as it would in real time
				peak = max(peak, l.Metrics().Agents)
			}
		}
		if m := l.Metrics(); peak > 1000 || m.Evictions < 19_000 {
			t.Fatalf("peak %d live agents (limit 1000), metrics %+v", peak, m)
		}
	})
}

func TestHostileStateFiles(t *testing.T) {
	for name, mutate := range map[string]func(data []byte) []byte{
		"ID escaping the directory": func(data []byte) []byte {
			return []byte(strings.Replace(string(data), base64.StdEncoding.EncodeToString([]byte("a")),
				base64.StdEncoding.EncodeToString([]byte("../../etc/passwd")), 1))
		},
		"huge": func(data []byte) []byte { return append(data, make([]byte, 5<<20)...) },
		"a huge line of spaces": func(data []byte) []byte {
			return append([]byte(strings.Repeat(" ", 1<<20)), data...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.l.SetConfig("a", si.Config{Route: "r"})
			e.l.Close()
			file := filepath.Join(e.dir, "agents", agentFiles(t, e.dir)[0])
			data, _ := os.ReadFile(file)
			os.WriteFile(file, mutate(data), 0o600)
			e.open()
			rep := e.call("a", nil, 0)
			if name == "a huge line of spaces" {
				// Valid JSON after all: it loads.
				if rep.LoopErr != nil || e.l.Config("a").Route != "r" {
					t.Fatalf("report %+v", rep)
				}
				return
			}
			if !errors.Is(rep.LoopErr, si.ErrCorruptState) || e.l.Config("a").Route != "" {
				t.Fatalf("report %+v, config %+v", rep, e.l.Config("a"))
			}
		})
	}
}

func TestReopenManyAgents(t *testing.T) {
	e := newEnv(t)
	const n = 500
	for i := range n {
		e.l.SetConfig(fmt.Sprint("agent-", i), si.Config{MaxAttempts: 1 + i%5})
	}
	e.l.Close()
	e.open()
	if m := e.l.Metrics(); m.Agents != 0 {
		t.Fatalf("New loaded %d agents eagerly", m.Agents)
	}
	for i := range n {
		if rep := e.call(fmt.Sprint("agent-", i), nil, 0); rep.ConfigVersion != 2 || rep.LoopErr != nil {
			t.Fatalf("agent %d: %+v", i, rep)
		}
	}
	if m := e.l.Metrics(); m.Loads != n {
		t.Errorf("loads = %d", m.Loads)
	}
}

func TestReadEventsSkipsATornLine(t *testing.T) {
	in := `{"id":"1","type":"rolled_back","agent_id":"a","time":"2026-03-01T00:00:00Z","message":"m"}` + "\n" +
		`{"id":"2","type":"wrong","time":12}` + "\n" + // wrong types
		`{"id":"3","type":"rolled_ba`
	var got []si.Event
	skipped, err := si.ReadEvents(strings.NewReader(in), func(e si.Event) error { got = append(got, e); return nil })
	if err != nil || len(got) != 1 || got[0].Type != si.EventRolledBack || skipped != 2 {
		t.Fatalf("events %+v, skipped %d, err %v", got, skipped, err)
	}
}

func TestTemporaryFilesOfACrashAreRemovedAtOpen(t *testing.T) {
	e := newEnv(t)
	e.l.SetConfig("a", si.Config{Route: "r"})
	e.l.Close()
	stale := []string{
		filepath.Join(e.dir, "agents", ".a_0123.json.tmp-12345"),
		filepath.Join(e.dir, ".traces-20260301T000000.000000000Z-000000.jsonl.gz.tmp-999"),
	}
	for _, f := range stale {
		os.WriteFile(f, []byte("half a write"), 0o600)
	}
	keep := filepath.Join(e.dir, "agents", "notes.txt") // not ours: left alone
	os.WriteFile(keep, []byte("x"), 0o600)
	e.open()
	for _, f := range stale {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", f, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file that is not a temporary file was removed: %v", err)
	}
	if got := e.l.Config("a"); got.Route != "r" {
		t.Errorf("config = %+v", got)
	}
}
