// Command quickstart shows the loop at work on a simulated flaky agent, on
// a simulated clock, with no key and no network:
//
//	go run ./examples/quickstart
//
// An order-lookup agent calls an upstream whose primary region starts to
// hang. The loop notices the failures piling up and asks its strategy for
// a tweak. The first tweak (the mirror route) makes things worse and is
// rolled back; the second (the backup region) fixes the agent and is
// confirmed.
//
// The program uses only the public package, so it can be copied into a
// module of your own as it is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// calls is how many calls the quick start makes, one every interval.
const (
	calls    = 75
	interval = 10 * time.Minute
)

// simStart returns the simulation's first instant: its calls end now, so
// that `selfimprove status` and the dashboard, which look at the window
// before the current time, show them.
func simStart() time.Time {
	return time.Now().UTC().Truncate(time.Minute).Add(-calls * interval)
}

var errMirrorDown = errors.New("mirror: 503 service unavailable")

// simClock is a simulated clock: it reads a time that moves only when told,
// so the program runs a day of calls in milliseconds. It is safe for
// concurrent use, as the loop also reads its clock from background work.
type simClock struct {
	mu sync.Mutex
	t  time.Time
}

// The loop reads time through selfimprove.Clock. A clock that also has
// Sleep (see Clock) is used for the waits between retries, so that a
// simulated clock advances instead of sleeping.
var (
	_ selfimprove.Clock = (*simClock)(nil)
	_ interface {
		Sleep(context.Context, time.Duration) error
	} = (*simClock)(nil)
)

// Now returns the simulated time.
func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the simulated time forward by d.
func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep advances the clock by d at once, unless ctx has ended.
func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// upstream simulates the service the agent calls through three routes:
// the primary region (30ms, until it starts to hang), a broken mirror, and
// a backup region (40ms).
type upstream struct {
	clock       *simClock
	primaryHung bool
}

// call is the agent's work: the loop passes it the config to use.
func (u *upstream) call(ctx context.Context, cfg selfimprove.Config) error {
	switch {
	case cfg.Route == "mirror":
		u.clock.Advance(20 * time.Millisecond)
		return errMirrorDown
	case cfg.Route == "backup":
		u.clock.Advance(40 * time.Millisecond)
		return nil
	case u.primaryHung:
		u.clock.Advance(cfg.Timeout) // hangs until the config's timeout
		return context.DeadlineExceeded
	}
	u.clock.Advance(30 * time.Millisecond)
	return nil
}

// strategy first tries the mirror route, then the backup region: a
// stand-in for the analysis a real strategy (or an LLM) would do. It reads
// what the loop rolled back before, and does not propose it again.
func strategy(ctx context.Context, a selfimprove.Analysis) (*selfimprove.Tweak, error) {
	next := a.Config
	next.Route = "mirror"
	for _, r := range a.Rejected {
		if r.Config.Route == "mirror" {
			next.Route = "backup"
			return &selfimprove.Tweak{Config: next, Reason: "the mirror was rolled back: try the backup region"}, nil
		}
	}
	return &selfimprove.Tweak{Config: next, Reason: "the primary times out: try the mirror"}, nil
}

func main() {
	keep := flag.String("dir", "", "keep the state directory here (default: a temporary one, removed at the end)")
	flag.Parse()
	if err := run(os.Stdout, *keep); err != nil {
		log.Fatal(err)
	}
}

// run runs the quick start with its state in dir, or in a temporary
// directory removed at the end when dir is empty.
func run(w io.Writer, dir string) error {
	if ents, err := os.ReadDir(dir); dir != "" && err == nil && len(ents) > 0 {
		// A second run would go on from the first one's state and tell
		// another story under the same header.
		return fmt.Errorf("quickstart: %s already holds state from an earlier run: remove it (rm -r %s) or choose another -dir", dir, dir)
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "selfimprove-quickstart")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}

	start := simStart()
	clock := &simClock{t: start}
	loop, err := selfimprove.New(
		selfimprove.WithDir(dir),
		selfimprove.WithClock(clock),
		selfimprove.WithStrategy(selfimprove.StrategyFunc(strategy)),
		selfimprove.WithDefaultConfig(selfimprove.Config{Timeout: 50 * time.Millisecond, Route: "primary"}),
		selfimprove.WithNotifier(nil),
		selfimprove.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	if err != nil {
		return err
	}
	defer loop.Close()

	up := &upstream{clock: clock}
	t := &timeline{w: w, start: start}
	fmt.Fprintln(w, "A simulated order-lookup agent, one call every 10 minutes.")
	fmt.Fprintln(w, "Config v1: timeout 50ms, route primary. At this rate the agent is medium-frequency:")
	fmt.Fprintln(w, "3 failures in 24h call for a tweak, then the loop waits 6h before it tries another,\n"+
		"or 10 minutes after a rollback, to try the next candidate.")
	fmt.Fprintln(w, "Times are since the first call; the simulated calls end now.")
	fmt.Fprintln(w)
	for i := range calls {
		if i == 12 {
			up.primaryHung = true
			t.flush()
			t.note("the primary region starts to hang: every call runs into the 50ms timeout")
		}
		rep, _ := loop.ExecuteWithImprovement(context.Background(), "order-lookup", up.call)
		t.add(clock.Now(), rep)
		clock.Advance(interval)
	}
	t.flush()

	s := loop.Stats("order-lookup")
	cfg := loop.Config("order-lookup")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Now running config v%d (route %s); window: %d calls, %.0f%% success, profile %s.\n",
		cfg.Version, cfg.Route, s.Calls, 100*s.SuccessRate, s.Profile)
	for _, c := range loop.Changes("order-lookup") {
		fmt.Fprintf(w, "  change v%d→v%d %-11s %s\n", c.From.Version, c.To.Version, c.State, c.Reason)
	}
	fmt.Fprintf(w, "Health %.2f (recency-weighted success). Failure clusters in the window:\n", loop.Health("order-lookup"))
	for _, c := range loop.Clusters("order-lookup") {
		fmt.Fprintf(w, "  %2d× %-10s (%s, %s, cluster %s) %q\n", c.Count, c.Class, c.RootCause, c.Trend, c.ID, c.Signature)
	}
	return nil
}

// timeline prints calls, folding runs of like calls into one line.
type timeline struct {
	w          io.Writer
	start      time.Time
	first      time.Time
	last       time.Time
	n          int
	version    int
	ok         bool
	errText    string
	runStarted bool
}

func (t *timeline) add(now time.Time, rep selfimprove.Report) {
	errText := ""
	if rep.Err != nil {
		errText = rep.Err.Error()
	}
	if t.runStarted && (rep.ConfigVersion != t.version || rep.Success != t.ok || errText != t.errText) {
		t.flush()
	}
	if !t.runStarted {
		t.first, t.version, t.ok, t.errText, t.runStarted = now, rep.ConfigVersion, rep.Success, errText, true
	}
	t.last = now
	t.n++
	if c := rep.Improvement; c != nil {
		t.flush()
		t.note(fmt.Sprintf("APPLIED   v%d: %s", c.To.Version, c.Reason))
	}
	if rep.ImprovementTriggered && rep.Improvement == nil {
		t.flush()
		t.note("threshold crossed, but no tweak was applied")
	}
	if c := rep.Rollback; c != nil {
		t.flush()
		t.note(fmt.Sprintf("ROLLED BACK v%d → v%d: %s", c.To.Version, c.From.Version, c.Verdict))
	}
	if c := rep.Confirmed; c != nil {
		t.flush()
		t.note(fmt.Sprintf("CONFIRMED v%d: %s", c.To.Version, c.Verdict))
	}
}

func (t *timeline) flush() {
	if !t.runStarted {
		return
	}
	outcome := "ok"
	if !t.ok {
		outcome = "failed: " + t.errText
	}
	when := since(t.first.Sub(t.start))
	if t.n > 1 {
		when += "–" + since(t.last.Sub(t.start))
	}
	fmt.Fprintf(t.w, "  %-10s v%d  %2d call%s %s\n", when, t.version, t.n, plural(t.n), outcome)
	t.n, t.runStarted = 0, false
}

func (t *timeline) note(s string) {
	fmt.Fprintf(t.w, "  %s %s\n", strings.Repeat(" ", 10), "» "+s)
}

// since formats d, a time since the first call, as h:mm.
func since(d time.Duration) string {
	return fmt.Sprintf("%d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

func plural(n int) string {
	if n == 1 {
		return " "
	}
	return "s"
}
