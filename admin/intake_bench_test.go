package admin_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// BenchmarkIntakeBatch is the cost of a batch of 500 outcomes over a
// state directory: booked (of 50 agents the loop knows), and refused by
// the rate bound, of the same agents and of 500 it does not know (issue
// 42, finding 7: a refused batch must cost at most what a booked one
// does).
func BenchmarkIntakeBatch(b *testing.B) {
	l, err := si.New(si.WithDir(b.TempDir()), si.WithNotifier(nil), si.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	known, unknown := make([]string, 500), make([]string, 500)
	for i := range known {
		known[i], unknown[i] = fmt.Sprintf("known-%02d", i%50), fmt.Sprintf("new-%03d", i)
	}
	run := func(b *testing.B, rate float64, body string, want int) {
		h := admin.Handler(l, admin.Options{Token: token, OutcomeRate: rate, SampleEvery: -1})
		if want == http.StatusTooManyRequests {
			httptestPost(h, batchOf(known...)) // takes the burst
		}
		for b.Loop() {
			if code := httptestPost(h, body); code != want {
				b.Fatalf("%d, want %d", code, want)
			}
		}
	}
	if code := httptestPost(admin.Handler(l, admin.Options{Token: token}), batchOf(known[:50]...)); code != 200 {
		b.Fatalf("the known agents: %d", code)
	}
	b.Run("accepted", func(b *testing.B) { run(b, 1e9, batchOf(known...), http.StatusOK) })
	b.Run("refused", func(b *testing.B) { run(b, 1e-9, batchOf(known...), http.StatusTooManyRequests) })
	b.Run("refused-new", func(b *testing.B) { run(b, 1e-9, batchOf(unknown...), http.StatusTooManyRequests) })
}

// httptestPost posts a batch to h with the token and returns the status.
func httptestPost(h http.Handler, body string) int {
	req := httptest.NewRequest("POST", "http://localhost/api/outcomes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}
