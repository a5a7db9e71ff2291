package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// maxImage bounds a screenshot kept in docs/img.
const maxImage = 300 << 10

// quickstartAgent is the quick start's agent.
const quickstartAgent = "order-lookup"

// TestDashboardScreenshots runs the quick start (go run
// ./examples/quickstart -dir DIR), serves its state directory with
// admin.Handler over a Loop opened on it, as `selfimprove serve --dir`
// does, and takes screenshots of the agent list, the quick start's agent
// and the overview at 1400 and at 390 px wide: under out/, and with
// UPDATE_SCREENSHOTS=1 also into docs/img/ for docs/dashboard.md.
func TestDashboardScreenshots(t *testing.T) {
	ctx := newBrowser(t)
	l := quickstartLoop(t, false)
	srv := serve(t, l, admin.Options{Token: dashToken, OpenReads: true})
	for _, w := range viewports {
		t.Run(w.name, func(t *testing.T) {
			do := doer(t, ctx)
			do("viewport", chromedp.EmulateViewport(w.width, w.height))
			do("list", chromedp.Navigate(srv.URL+"/si/#"), chromedp.Reload(),
				until(`document.querySelector("#count").textContent === "1 of 1 agents" && document.querySelector("#conn").classList.contains("live")`),
				handled("/si/api/proposals", 1), handled("/si/api/fleet", 1))
			picture(t, ctx, "quickstart-list-"+w.name)
			do("agent", chromedp.Navigate(srv.URL+"/si/#/agent/"+quickstartAgent), chromedp.Reload(),
				until(`document.querySelector("#agent-title").textContent === "`+quickstartAgent+`" &&
					document.querySelector("#timeline rect.marker.rollback") !== null && document.querySelector("#timeline rect.marker.confirm") !== null &&
					document.querySelector("#next-panel").textContent.includes("Next step")`),
				handled("/si/api/agents/"+quickstartAgent+"/series", 1))
			picture(t, ctx, "quickstart-agent-"+w.name)
			do("overview", chromedp.Navigate(srv.URL+"/si/#/overview"), chromedp.Reload(),
				until(`document.querySelectorAll("#ov-grid .spark-card").length === 1`), handled("/si/api/overview", 1))
			picture(t, ctx, "quickstart-overview-"+w.name)
			if !eval[bool](t, ctx, noPageScroll) {
				t.Errorf("the overview scrolls sideways at %s px", w.name)
			}
		})
	}
}

// viewports are the widths the browser tests check: a laptop's, a phone's.
var viewports = []struct {
	name          string
	width, height int64
}{{"1400", 1400, 900}, {"390", 390, 844}}

// quickstartLoop runs the quick start (runQuickstart) and opens a Loop on
// its directory, as serve --dir does (read-only: as serve --dir
// --read-only and status --dir do); the quick start's changes are one
// rolled back, then one confirmed.
func quickstartLoop(t *testing.T, readOnly bool) *si.Loop {
	t.Helper()
	dir := runQuickstart(t)
	where := si.WithDir(dir)
	if readOnly {
		ro, err := si.OpenReadOnlyStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		where = si.WithStore(ro)
	}
	l, err := si.New(where, si.WithNotifier(nil), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if chs := l.Changes(quickstartAgent); len(chs) != 2 || chs[0].State != si.ChangeRolledBack || chs[1].State != si.ChangeConfirmed {
		t.Fatalf("the quick start's changes: %+v, want one rolled back, then one confirmed", chs)
	}
	return l
}

// runQuickstart runs the quick start with its state in a new directory,
// which it returns.
func runQuickstart(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go on PATH to run the quick start: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(gobin, "run", "./examples/quickstart", "-dir", dir)
	cmd.Dir = ".." // the repository's root module
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/quickstart: %v\n%s", err, out)
	}
	t.Logf("the quick start:\n%s", out)
	return dir
}

// picture saves a screenshot of the whole page as out/<test>/name.png,
// and with UPDATE_SCREENSHOTS=1 as docs/img/name.png too (at most
// maxImage bytes).
func picture(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	b := shot(t, ctx, name)
	if os.Getenv("UPDATE_SCREENSHOTS") != "1" {
		return
	}
	if len(b) > maxImage {
		t.Errorf("%s: %d KB, over the %d KB kept in docs/img", name, len(b)>>10, maxImage>>10)
		return
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "img", name+".png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardDocImages: every image docs/dashboard.md shows is in
// docs/img and under maxImage bytes.
func TestDashboardDocImages(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "dashboard.md"))
	if err != nil {
		t.Fatal(err)
	}
	imgs := regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllSubmatch(doc, -1)
	if len(imgs) == 0 {
		t.Fatal("docs/dashboard.md shows no image")
	}
	for _, m := range imgs {
		fi, err := os.Stat(filepath.Join("..", "docs", string(m[1])))
		if err != nil {
			t.Errorf("docs/dashboard.md shows %s: %v", m[1], err)
		} else if fi.Size() > maxImage {
			t.Errorf("%s: %d KB, want at most %d KB", m[1], fi.Size()>>10, maxImage>>10)
		}
	}
}
