package admin

import (
	"embed"
	"io/fs"
	"math"
	"net/http"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// dashboardFiles are the dashboard's static files: a page, its script and
// its style, with no external resources and no build step.
//
//go:embed dashboard/index.html dashboard/app.js dashboard/app.css dashboard/glossary.md
var dashboardFiles embed.FS

// dashboardCSP allows the dashboard's own script, style and API calls
// only.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Dashboard returns the handler of the embedded dashboard: GET / serves
// the page, GET /app.js and /app.css its script and style, GET
// /glossary.md the glossary it shows. The files hold
// no data: the page reads the JSON API and the event stream with relative
// URLs, so it works under http.StripPrefix, and asks for the token when
// the API wants one. Handler serves it at its root unless
// Options.Dashboard is set.
func Dashboard() http.Handler {
	sub, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", dashboardCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// quantile returns quantile q of h, interpolated inside its bucket as
// if the bucket's calls spread evenly over it: from the previous bound
// (or 0) up to its own bound, or less where the calls' durations (Sum)
// say they end lower (see spanTop), so that the figure stays within what
// was observed: calls of 3 µs, all in the first bucket (up to 5 ms),
// give a p95 of about 6 µs, not 4.75 ms. It returns the largest bound
// when q falls among the calls over every bound, and 0 for no calls.
func quantile(h selfimprove.Histogram, q float64) time.Duration {
	bounds := h.Bounds
	if h.Count == 0 || len(bounds) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var seen uint64
	for i, c := range h.Counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i >= len(bounds) {
			break
		}
		var lo time.Duration
		if i > 0 {
			lo = bounds[i-1]
		}
		f := max(0, (rank-float64(seen))/float64(c))
		return lo + time.Duration(math.Round(f*float64(spanTop(h, i)-lo)))
	}
	return bounds[len(bounds)-1]
}

// spanTop returns where the calls of h's bucket i end, at most: its
// bound, or less when the durations' sum (Sum) allows no more. The other
// buckets' calls took at least their lower bounds each, which leaves the
// bucket's calls a mean of m at most; calls spread evenly from the
// bucket's lower bound lo have the mean m when they end at 2m-lo.
func spanTop(h selfimprove.Histogram, i int) time.Duration {
	lower := func(j int) float64 {
		if j == 0 || j > len(h.Bounds) {
			return 0
		}
		return float64(h.Bounds[j-1])
	}
	rest := float64(h.Sum)
	for j, c := range h.Counts {
		if j != i {
			rest -= float64(c) * lower(j)
		}
	}
	lo, hi := lower(i), float64(h.Bounds[i])
	m := rest / float64(h.Counts[i])
	return time.Duration(math.Round(min(hi, max(lo, 2*m-lo))))
}
