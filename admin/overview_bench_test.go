package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// DiskLoads is a FileStore that counts the agent states it loads (for
// this package's tests, internal and external: see OpenCounting).
type DiskLoads struct {
	*selfimprove.FileStore
	Loads atomic.Int64
}

// LoadAgent counts the load and loads.
func (c *DiskLoads) LoadAgent(id string, decode func([]byte) error) error {
	c.Loads.Add(1)
	return c.FileStore.LoadAgent(id, decode)
}

// OpenCounting opens the FileStore in dir with a counting wrapper, and a
// Loop on it (loopOpts, then opts), closed when the test ends.
func OpenCounting(tb testing.TB, dir string, clk *fakeclock.Clock, opts ...selfimprove.Option) (*selfimprove.Loop, *DiskLoads) {
	tb.Helper()
	fs, err := selfimprove.OpenFileStore(dir, selfimprove.FileOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	cs := &DiskLoads{FileStore: fs}
	l, err := selfimprove.New(loopOpts(clk, append([]selfimprove.Option{selfimprove.WithStore(cs)}, opts...)...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l, cs
}

// ovStart is the clock's start in the overview's internal tests.
var ovStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// calls makes ok successful then bad failed calls of agent on l.
func calls(l *selfimprove.Loop, agent string, ok, bad int) {
	for i := range ok + bad {
		l.ExecuteWithImprovement(context.Background(), agent, func(context.Context, selfimprove.Config) error {
			if i >= ok {
				return errors.New("upstream 503")
			}
			return nil
		})
	}
}

// loopOpts are the options of the overview's internal tests on clk.
func loopOpts(clk *fakeclock.Clock, opts ...selfimprove.Option) []selfimprove.Option {
	return append([]selfimprove.Option{selfimprove.WithClock(clk), selfimprove.WithNotifier(nil), selfimprove.WithStrategy(nil),
		selfimprove.WithFlushInterval(0), selfimprove.WithRetryPolicy(selfimprove.RetryPolicy{TransientAttempts: 1}),
		selfimprove.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
}

// saveAgents saves n agents in a FileStore in dir: agent i (agent-%05d)
// made 5 calls, i%4 of them failed (a health of 1, 0.8, 0.6 or 0.4).
func saveAgents(tb testing.TB, dir string, clk *fakeclock.Clock, n int) {
	tb.Helper()
	l, err := selfimprove.New(loopOpts(clk, selfimprove.WithDir(dir))...)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		calls(l, fmt.Sprintf("agent-%05d", i), 5-i%4, i%4)
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
}

// overviewServer opens the FileStore in dir with a counting wrapper, a
// Loop on it, and the handler's state on the Loop with o, as Handler
// makes it but for the background loop: the caller runs its tick.
func overviewServer(tb testing.TB, dir string, clk *fakeclock.Clock, o Options, opts ...selfimprove.Option) (*server, *DiskLoads) {
	tb.Helper()
	l, cs := OpenCounting(tb, dir, clk, opts...)
	s := &server{l: l, o: o.withDefaults()}
	s.samples.agents, s.samples.max = map[string]*timeline{}, s.o.MaxTimelines
	return s, cs
}

// readOverview serves GET /api/overview?query by s (the handler alone:
// the answer is not decoded).
func readOverview(tb testing.TB, s *server, query string) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	s.overview(rec, httptest.NewRequest("GET", "/api/overview?"+query, nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET /api/overview?%s: %d %s", query, rec.Code, rec.Body)
	}
	return rec
}

// BenchmarkOverview5000 measures a read of the overview's first page (60
// agents) with 5,000 agents on disk and none in memory, after the first
// read, with the default options but the clock (SampleEvery a minute):
//
//   - now: reads at the same time;
//   - minute: a minute of the server, as its background loop runs it:
//     the clock moves a minute, the tick runs (a sample of every agent in
//     memory, then the overview's background pass: the page's summaries
//     and the 3,750 stale keys of agents whose window holds failures are
//     read again), then a read. ns/op counts both; req-ns/op and
//     req-loads/op are the read's alone, tick-ns/op and tick-loads/op the
//     tick's.
//
// loads/op counts the agent states read from the store.
func BenchmarkOverview5000(b *testing.B) {
	dir := b.TempDir()
	clk := fakeclock.New(ovStart)
	saveAgents(b, dir, clk, 5000)
	s, cs := overviewServer(b, dir, clk, Options{Now: clk.Now})
	readOverview(b, s, "")
	if s.ov.gen != 1 || len(s.ov.order) != 5000 {
		b.Fatalf("after the first read: %d agents", len(s.ov.order))
	}
	b.Run("now", func(b *testing.B) {
		before := cs.Loads.Load()
		b.ReportAllocs()
		for b.Loop() {
			readOverview(b, s, "")
		}
		b.ReportMetric(float64(cs.Loads.Load()-before)/float64(b.N), "loads/op")
	})
	b.Run("minute", func(b *testing.B) {
		var req, tick time.Duration
		var reqLoads, tickLoads int64
		for b.Loop() {
			clk.Advance(time.Minute)
			t, n := time.Now(), cs.Loads.Load()
			s.tick()
			tick, tickLoads = tick+time.Since(t), tickLoads+cs.Loads.Load()-n
			t, n = time.Now(), cs.Loads.Load()
			readOverview(b, s, "")
			req, reqLoads = req+time.Since(t), reqLoads+cs.Loads.Load()-n
		}
		b.ReportMetric(float64(req.Nanoseconds())/float64(b.N), "req-ns/op")
		b.ReportMetric(float64(reqLoads)/float64(b.N), "req-loads/op")
		b.ReportMetric(float64(tick.Nanoseconds())/float64(b.N), "tick-ns/op")
		b.ReportMetric(float64(tickLoads)/float64(b.N), "tick-loads/op")
	})
}
