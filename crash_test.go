package selfimprove_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

const (
	crashDirEnv  = "SELFIMPROVE_CRASH_DIR"
	crashModeEnv = "SELFIMPROVE_CRASH_MODE"
)

// TestMain runs the crash tests' child process when asked to, and the
// tests otherwise.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir, os.Getenv(crashModeEnv))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild runs the loop until it is killed. It reports on stdout each
// call and each SetConfig after it returned: "call <id> <unix ns>" and
// "event <n>".
func crashChild(dir, mode string) {
	tm := si.TracesSync
	if mode == "batched" {
		tm = si.TracesBatched
	}
	l, err := si.New(si.WithDir(dir), si.WithTraces(tm), si.WithLogger(quiet), si.WithNotifier(nil), si.WithStrategy(nil),
		si.WithFlushInterval(50*time.Millisecond))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	deadline := time.Now().Add(time.Minute) // the parent kills us long before
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				id := g*1_000_000 + i
				l.ExecuteWithImprovement(context.Background(), fmt.Sprint("agent-", g), func(context.Context, si.Config) error {
					return fmt.Errorf("call %d", id)
				})
				say("call %d %d", id, time.Now().UnixNano())
				if g == 0 && i%25 == 0 {
					if err := l.SetConfig("ops", si.Config{Route: fmt.Sprint(i)}); err == nil {
						say("event %d", i)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestCrashSyncLosesNothingThatReturned(t *testing.T) { crashTest(t, "sync", 400, 0) }

func TestCrashBatchedLosesAtMostTheLastFlush(t *testing.T) {
	crashTest(t, "batched", 4000, 500*time.Millisecond) // several flushes before the kill
}

// crashTest kills the child once it reported calls calls over at least
// span, and checks what survived.
func crashTest(t *testing.T, mode string, calls int, span time.Duration) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	returned := map[int]int64{} // call ID → when it returned (child's clock)
	var first, last int64
	lastEvent := -1
	sc := bufio.NewScanner(stdout)
	read := func(limit int) {
		for (limit == 0 || len(returned) < limit || time.Duration(last-first) < span) && sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "call":
				id, _ := strconv.Atoi(f[1])
				at, _ := strconv.ParseInt(f[2], 10, 64)
				returned[id] = at
				if first == 0 {
					first = at
				}
				last = at
			case len(f) == 2 && f[0] == "event":
				lastEvent, _ = strconv.Atoi(f[1])
			default:
				t.Fatalf("child said %q", sc.Text())
			}
		}
	}
	read(calls)
	killedAt := time.Now().UnixNano()
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	read(0) // what the child said before it died still counts
	cmd.Wait()
	if len(returned) < calls || lastEvent < 0 {
		t.Fatalf("the child reported %d calls and event %d before dying", len(returned), lastEvent)
	}

	// Every trace of a call that returned is on disk (sync), or all but
	// those of the last flush interval (batched).
	checkCrashTraces(t, dir, mode, returned, killedAt)

	// Every event of a SetConfig that returned is logged.
	checkCrashEvents(t, dir, lastEvent)

	// State files parse; the dead process's lock is gone; the state carries on.
	checkCrashState(t, dir, lastEvent)
}

// checkCrashTraces checks that the trace of every call in returned (call
// ID → when it returned) is in dir: all of them (mode sync), or all but
// those that returned in the last flush interval before killedAt
// (batched).
func checkCrashTraces(t *testing.T, dir, mode string, returned map[int]int64, killedAt int64) {
	t.Helper()
	var traces []si.Trace
	var skipped int
	if _, err := os.Stat(filepath.Join(dir, "traces.jsonl")); err == nil {
		traces, skipped = readTraces(t, dir)
	}
	if skipped > 1 {
		t.Errorf("%d trace lines skipped; at most the last, torn one may be", skipped)
	}
	onDisk := map[int]bool{}
	for _, tr := range traces {
		id, err := strconv.Atoi(strings.TrimPrefix(tr.Err, "call "))
		if err != nil {
			t.Fatalf("trace %+v", tr)
		}
		onDisk[id] = true
	}
	// Batched: the writer flushes every 100ms; allow for one write and
	// for this machine being busy.
	bound := int64(100*time.Millisecond + 400*time.Millisecond)
	missing := 0
	for id, at := range returned {
		if onDisk[id] {
			continue
		}
		missing++
		if mode == "sync" {
			t.Errorf("call %d returned but its trace is not on disk", id)
		} else if at < killedAt-bound {
			t.Errorf("call %d returned %v before the kill and its trace is lost", id, time.Duration(killedAt-at))
		}
	}
	t.Logf("%s: %d calls returned, %d traces on disk, %d missing, %d skipped", mode, len(returned), len(traces), missing, skipped)
}

// checkCrashEvents checks that the event of every SetConfig up to
// lastEvent is logged in dir.
func checkCrashEvents(t *testing.T, dir string, lastEvent int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	if _, err := si.ReadEvents(f, func(e si.Event) error {
		if e.Change != nil {
			routes[e.Change.To.Route] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i := 0; i <= lastEvent; i += 25 {
		if !routes[fmt.Sprint(i)] {
			t.Errorf("event of SetConfig %d returned but is not logged", i)
		}
	}
}

// checkCrashState checks that the state files in dir parse, and that a
// Loop reopens dir, carrying on from SetConfig lastEvent or later.
func checkCrashState(t *testing.T, dir string, lastEvent int) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "agents"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			continue // a temporary file of an interrupted save: never read
		}
		data, _ := os.ReadFile(filepath.Join(dir, "agents", e.Name()))
		if !json.Valid(data) {
			t.Errorf("state file %s does not parse", e.Name())
		}
	}
	l, err := si.New(si.WithDir(dir), si.WithLogger(quiet), si.WithNotifier(nil))
	if err != nil {
		t.Fatalf("reopening after the crash: %v", err)
	}
	defer l.Close()
	got, _ := strconv.Atoi(l.Config("ops").Route)
	if got < lastEvent {
		t.Errorf("config after restart is from SetConfig %d, older than %d which returned", got, lastEvent)
	}
	if rep, _ := l.ExecuteWithImprovement(context.Background(), "agent-0", func(context.Context, si.Config) error { return nil }); rep.LoopErr != nil {
		t.Errorf("after restart: %v", rep.LoopErr)
	}
}
