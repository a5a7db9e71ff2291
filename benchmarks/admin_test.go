package benchmarks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// BenchmarkSuccessWithAdmin is BenchmarkSuccess with the admin handler
// mounted and 100 clients connected to its event stream, each reading
// it. Compare with BenchmarkSuccess in the same run.
func BenchmarkSuccessWithAdmin(b *testing.B) {
	l := newLoop(b)
	srv := httptest.NewServer(admin.Handler(l, admin.Options{}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 100 {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events/stream", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			b.Fatalf("stream: %s", res.Status)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer res.Body.Close()
			io.Copy(io.Discard, res.Body)
		}()
	}
	l.ExecuteWithImprovement(ctx, "agent", work)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_, _ = l.ExecuteWithImprovement(ctx, "agent", work)
	}
}
