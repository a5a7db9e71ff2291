package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// TestDashboardQualityPanels: the timeline of an agent whose calls are
// scored and costed has a quality panel (0–1) and a cost panel below the
// latency, with a point per slot; an agent with neither has no such
// panel, and its timeline and latency sit where the other's do.
func TestDashboardQualityPanels(t *testing.T) {
	ctx := newBrowser(t)
	d := plainLoop(t)
	d.l.AddScore(context.Background(), 0) // the calls get a place for their score and cost
	srv := serve(t, d.l, admin.Options{Now: d.clk.Now, Token: dashToken, OpenReads: true})
	for h := range 6 { // six hours: six quarter hours of the day with scores
		for i := range 8 {
			d.l.ExecuteWithImprovement(context.Background(), "graded", func(ctx context.Context, _ si.Config) error {
				d.clk.Advance(30 * time.Millisecond)
				si.AddCost(ctx, 0.002*float64(1+h%2))
				return d.l.AddScore(ctx, 0.9-0.1*float64(h)+0.01*float64(i))
			})
		}
		d.calls(t, "plain", 8, nil)
		for _, id := range []string{"graded", "plain"} {
			res, err := http.Get(srv.URL + "/si/api/agents/" + id + "/series")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		d.clk.Advance(time.Hour)
	}
	do := doer(t, ctx)
	do("viewport", chromedp.EmulateViewport(1200, 900))
	type panels struct {
		Quality, Cost         bool // shown
		QDots, CDots          int
		QLabels               string
		TimelineY, LatencyY   float64
		QualityY, CostY       float64
		QualityMin, QualityMx float64
	}
	const read = `(() => { const box = (s) => document.querySelector(s).getBoundingClientRect();
		const ys = [...document.querySelectorAll("#quality circle.dot")].map(e => e.getBoundingClientRect().y);
		return {Quality: !document.querySelector("#quality-panel").hidden, Cost: !document.querySelector("#cost-panel").hidden,
			QDots: document.querySelectorAll("#quality circle.dot").length, CDots: document.querySelectorAll("#cost circle.dot").length,
			QLabels: [...document.querySelectorAll("#quality text")].map(e => e.textContent).join(" "),
			TimelineY: box("#timeline").y, LatencyY: box("#latency").y, QualityY: box("#quality-panel").y, CostY: box("#cost-panel").y,
			QualityMin: Math.min(...ys), QualityMx: Math.max(...ys)}; })()`
	do("graded", chromedp.Navigate(srv.URL+"/si/#/agent/graded"),
		until(`document.querySelectorAll("#quality circle.dot").length > 0 && document.querySelectorAll("#cost circle.dot").length > 0`))
	g := eval[panels](t, ctx, read)
	t.Logf("graded: %+v", g)
	if !g.Quality || !g.Cost || g.QDots != 6 || g.CDots != 6 || !(g.LatencyY < g.QualityY && g.QualityY < g.CostY) {
		t.Errorf("graded: %+v, want both panels below the latency, 6 points each", g)
	}
	if g.QLabels == "" || g.QualityMx-g.QualityMin < 20 {
		t.Errorf("graded: quality axis %q, dots from y %v to %v: the falling quality does not show", g.QLabels, g.QualityMin, g.QualityMx)
	}
	shot(t, ctx, "quality-graded")
	do("plain", chromedp.Navigate(srv.URL+"/si/#/agent/plain"),
		until(`document.querySelector("#agent-title").textContent === "plain" && document.querySelectorAll("#timeline polyline.series").length > 0`))
	p := eval[panels](t, ctx, read)
	t.Logf("plain: %+v", p)
	if p.Quality || p.Cost || p.QDots != 0 || p.CDots != 0 {
		t.Errorf("plain: %+v, want no quality or cost panel", p)
	}
	if p.TimelineY != g.TimelineY || p.LatencyY != g.LatencyY {
		t.Errorf("the timeline moved: at y %v and %v for plain, %v and %v for graded", p.TimelineY, p.LatencyY, g.TimelineY, g.LatencyY)
	}
	shot(t, ctx, "quality-plain")
}
