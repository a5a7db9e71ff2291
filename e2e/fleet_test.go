package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/fleettest"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// switchFleet is an in-process fleet that can be made unreachable.
type switchFleet struct {
	*fleettest.Fleet
	down atomic.Bool
}

var errFleetDown = fmt.Errorf("%w: connection refused", si.ErrFleetUnavailable)

func (f *switchFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	if f.down.Load() {
		return nil, errFleetDown
	}
	return f.Fleet.Add(ctx, d)
}

// TestDashboardFleet: the fleet panel shows the fleet up, its commits,
// then unreachable and back as the outage events stream in; a loop
// without a fleet has no panel.
func TestDashboardFleet(t *testing.T) {
	ctx := newBrowser(t)
	plain := serve(t, plainLoop(t).l, admin.Options{Token: dashToken, OpenReads: true})
	do := doer(t, ctx)
	do("open a loop without a fleet", chromedp.Navigate(plain.URL+"/si/"), chromedp.WaitVisible(`#conn.live`),
		handled("/si/api/fleet", 1)) // read after the agents
	if eval[bool](t, ctx, `!document.querySelector("#fleet").hidden`) {
		t.Error("a fleet panel without a fleet")
	}

	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := &switchFleet{Fleet: fleettest.New(clk)}
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SetConfig("checkout", si.Config{Route: "main"}); err != nil {
		t.Fatal(err)
	}
	other := fleetReplica(t, clk, f) // a second replica: the panel shows both seen
	l.SyncFleet(context.Background())
	srv := serve(t, l, admin.Options{Token: dashToken, OpenReads: true, Now: clk.Now})
	do("open the page",
		chromedp.Navigate(srv.URL+"/si/"),
		chromedp.WaitVisible(`#conn.live`),
		chromedp.WaitVisible(`#fleet`),
		until(`document.querySelector("#fleet-state").textContent === "up"`))
	facts := strings.ReplaceAll(text(t, ctx, "#fleet-facts"), "\n", "")
	for _, want := range []string{"replica" + l.Metrics().FleetReplica, "commits1 · avg", "outages0", "revision lag0", "replicas seen2"} {
		if !strings.Contains(facts, want) {
			t.Errorf("fleet facts %q: missing %q", facts, want)
		}
	}
	reps := text(t, ctx, "#fleet-replicas")
	for _, want := range []string{l.Metrics().FleetReplica + " this replica · seen just now", other + " · seen just now"} {
		if !strings.Contains(reps, want) {
			t.Errorf("replicas seen %q: missing %q", reps, want)
		}
	}
	shot(t, ctx, "fleet-up")

	f.down.Store(true)
	l.SyncFleet(context.Background())
	do("the fleet unreachable",
		until(`document.querySelector("#fleet-state").textContent === "unreachable"`),
		until(`document.querySelector("#fleet-last").textContent.includes("fleet unreachable")`))
	if !strings.Contains(strings.ReplaceAll(text(t, ctx, "#fleet-facts"), "\n", ""), "outages1") {
		t.Errorf("facts while down: %q", text(t, ctx, "#fleet-facts"))
	}
	shot(t, ctx, "fleet-down")

	f.down.Store(false)
	l.SyncFleet(context.Background())
	clk.Advance(2 * time.Second) // the fleet answered for over a second: the outage is over
	l.SyncFleet(context.Background())
	do("the fleet back",
		until(`document.querySelector("#fleet-state").textContent === "up"`),
		until(`document.querySelector("#fleet-last").textContent.includes("reachable again")`))
}

// fleetReplica starts another replica on fleet f, tells the fleet it is
// alive, and returns its name.
func fleetReplica(t *testing.T, clk *fakeclock.Clock, f si.Fleet) string {
	t.Helper()
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithFlushInterval(0),
		si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SyncFleet(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l.Metrics().FleetReplica
}
