package admin_test

import (
	"fmt"
	"math"
	"net/http/httptest"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestIntakeBatchQualities: the outcomes of one batch are booked at one
// time, so their calls share an ID; each outcome's quality counts all
// the same (a score without a key is a sample). With the call ID as the
// idempotency key and no key of their own, one of four counted.
func TestIntakeBatchQualities(t *testing.T) {
	l, _ := newLoop(t)
	srv := httptest.NewServer(admin.Handler(l, admin.Options{Token: token, IntakeToken: intakeToken, IntakeAgents: []string{"py"}}))
	t.Cleanup(srv.Close)
	r := &remote{t: t, srv: srv}
	r.refresh("py")
	var outs []string
	for _, q := range []float64{0.2, 0.4, 0.6, 0.8} {
		outs = append(outs, fmt.Sprintf(`{"agent": "py", "success": true, "duration_ms": 10, "config_version": %d, "quality": %g}`, r.cfg.Version, q))
	}
	r.report(outs...)
	if s := l.Stats("py"); s.Scored != 4 || math.Abs(s.Quality-0.5) > 1e-9 {
		t.Fatalf("stats: %d scored, quality %v; want 4 at 0.5", s.Scored, s.Quality)
	}
}
