package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// The browser tests assert on work counted (requests the page made,
// bytes it read, table rows it created, events the loop recorded), never
// on how long something took: they pass with a full build running beside
// them. Their only time limits are hang guards, long enough that only a
// hang reaches them.
const (
	// hangGuard bounds one wait: for the page to show something, or for
	// the loop's background analysis.
	hangGuard = 3 * time.Minute
	// testGuard bounds a whole browser test (less where the test binary's
	// own -timeout ends sooner).
	testGuard = 10 * time.Minute
)

// guardFor returns how long the browser of t may run: testGuard, or until
// shortly before the test binary's deadline, so that a hang fails the test
// with the step it was at rather than the binary with a stack dump.
func guardFor(t testing.TB) time.Duration {
	g := testGuard
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := tt.Deadline(); ok {
			g = min(g, time.Until(d)-15*time.Second)
		}
	}
	return g
}

// pageScript runs in each document before the dashboard's own script:
//
//   - The page's clock stands still: Date.now returns the same instant
//     throughout, so that the page's "now" (the handler's clock at its
//     last answer plus the browser's time since) is the handler's clock
//     exactly, and relative times do not drift with the machine's load.
//   - window.__e2e.rows counts the rows the page created in the agents
//     table (one page of rows per render).
//   - window.__e2e.handled counts, by path, the API answers whose body the
//     page has read and handled (counted in a task queued once the body is
//     read, so after the code awaiting it ran).
const pageScript = `(() => {
	if (window.__e2e) return;
	const t0 = Date.now();
	Date.now = () => t0;
	const e2e = window.__e2e = {rows: 0, handled: {}};
	new MutationObserver((ms) => {
		for (const m of ms) {
			const table = m.target.parentElement;
			if (m.target.nodeName !== "TBODY" || !table || table.id !== "agents") continue;
			for (const n of m.addedNodes) if (n.nodeName === "TR") e2e.rows++;
		}
	}).observe(document, {childList: true, subtree: true});
	const json = Response.prototype.json;
	Response.prototype.json = function () {
		const path = new URL(this.url).pathname;
		return json.call(this).finally(() => setTimeout(() => { e2e.handled[path] = (e2e.handled[path] || 0) + 1; }, 0));
	};
})();`

// instrument installs pageScript for every document the tab opens.
func instrument() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pageScript})
		return err
	})
}

// newBrowser starts headless Chromium with pageScript installed; the
// returned context bounds the whole test (guardFor).
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser(t)), chromedp.Headless, chromedp.WindowSize(1200, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	guard := guardFor(t)
	if guard < time.Minute {
		t.Fatalf("%v left before the test binary's -timeout: too little for a browser test; give go test a longer -timeout (e.g. 30m on a busy machine)", guard.Round(time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx, instrument()); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// until waits for a JavaScript expression to be true (hangGuard at most).
// chromedp's poll does not survive a new document: when the page's
// execution context goes while it waits, or it was handed the context of
// the document a Reload just replaced (the browser answers "Cannot find
// context with specified id"; seen once in three CI runs, on the first
// poll after a Reload), it fails. The expression is then asked again, of
// the new document, up to maxContextLost times, 50 ms apart: the same
// wait, on the page the test asked for.
func until(js string, opts ...chromedp.PollOption) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[chromedp.Void](js, append([]chromedp.PollOption{chromedp.WithPollingTimeout(hangGuard)}, opts...)...)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for lost := 0; ; lost++ {
			v, err := poll(ctx, t)
			if err == nil || lost == maxContextLost || !contextLost(err) {
				return v, err
			}
			select {
			case <-ctx.Done():
				return v, err
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// maxContextLost bounds the polls until asks again after the page's
// document changed under them.
const maxContextLost = 20

// contextLost reports whether err is the browser's answer to a poll whose
// document went: its execution context destroyed, or not found.
func contextLost(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") || strings.Contains(msg, "Execution context was destroyed")
}

// handled waits until the page has handled n answers from path (under the
// mount, e.g. "/si/api/fleet").
func handled(path string, n int) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`(window.__e2e.handled[%q] || 0) >= %d`, path, n))
}

// requests counts the requests a test server got, by path with the mount
// (/si) cut and without the query, and the bytes of their answers.
type requests struct {
	mu    sync.Mutex
	n     map[string]int
	bytes map[string]int64
}

// count returns the requests for path.
func (r *requests) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[path]
}

// sent returns the bytes answered to requests for path.
func (r *requests) sent(path string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes[path]
}

// snapshot returns a copy of the counts.
func (r *requests) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.n))
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

// countingWriter adds the bytes written to the requests' count.
type countingWriter struct {
	http.ResponseWriter
	r    *requests
	path string
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.r.mu.Lock()
	w.r.bytes[w.path] += int64(n)
	w.r.mu.Unlock()
	return n, err
}

// Unwrap lets http.ResponseController flush the event stream.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveCounted serves the admin handler of l under /si on a loopback
// port, counting the requests it gets.
func serveCounted(t testing.TB, l *si.Loop, o admin.Options) (*httptest.Server, *requests) {
	t.Helper()
	reqs := &requests{n: map[string]int{}, bytes: map[string]int64{}}
	h := http.StripPrefix("/si", admin.Handler(l, o))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/si")
		reqs.mu.Lock()
		reqs.n[p]++
		reqs.mu.Unlock()
		h.ServeHTTP(&countingWriter{ResponseWriter: w, r: reqs, path: p}, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.CloseClientConnections) // the stream, before Close waits for it
	return srv, reqs
}

// serve serves the admin handler of l under /si on a loopback port.
func serve(t testing.TB, l *si.Loop, o admin.Options) *httptest.Server {
	t.Helper()
	srv, _ := serveCounted(t, l, o)
	return srv
}

// waitLoop waits until cond holds, testing it again at each event the loop
// records: the loop's analysis runs in the background, and records an
// event when it applies a change or files a proposal.
func waitLoop(t *testing.T, l *si.Loop, what string, cond func() bool) {
	t.Helper()
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	for {
		err := waitEvents(l, cond, guard.C)
		switch {
		case err == nil:
			return
		case errors.Is(err, si.ErrSubscriberBehind): // subscribe again
		case errors.Is(err, errGuard):
			t.Fatalf("%s: not after %v of the loop's events", what, hangGuard)
		default:
			t.Fatalf("%s: %v", what, err)
		}
	}
}

var errGuard = errors.New("hang guard")

// waitEvents subscribes to l's events and tests cond first and then after
// each event, until it holds (nil), the guard fires, or the subscription
// ends (its error).
func waitEvents(l *si.Loop, cond func() bool, guard <-chan time.Time) error {
	sub := l.Subscribe("", 0)
	defer sub.Close()
	for !cond() {
		select {
		case _, ok := <-sub.C:
			if !ok {
				if err := sub.Err(); err != nil {
					return err
				}
				return si.ErrClosed
			}
		case <-guard:
			return errGuard
		}
	}
	return nil
}
