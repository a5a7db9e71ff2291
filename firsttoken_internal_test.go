package selfimprove

import (
	"testing"
	"time"
)

// A state file keeps the first-token timeout; the checker refuses one out
// of range; a file written before it (the goldens) reads 0.
func TestStateFileFirstTokenTimeout(t *testing.T) {
	a := stateGoldens[0]
	doc := readTestdata(t, a.v2)
	st, err := decodeState(doc, a.id)
	if err != nil || st.Config.FirstTokenTimeout != 0 {
		t.Fatalf("an old file: %v, first-token timeout %v", err, st.Config.FirstTokenTimeout)
	}
	for _, bad := range []string{"-1s", "1h0m0.001s"} {
		for _, field := range []string{"config.first_token_timeout", "history[0].first_token_timeout", "rejected[0].config.first_token_timeout"} {
			checkRejected(t, setJSON(t, doc, field, bad), a.id, "first_token_timeout")
		}
	}
	st, err = decodeState(setJSON(t, doc, "config.first_token_timeout", "1.5s"), a.id)
	if err != nil || st.Config.FirstTokenTimeout != 1500*time.Millisecond {
		t.Fatalf("decode: %v, %v", err, st.Config.FirstTokenTimeout)
	}
	roundTrip(t, &st)
}

func TestHistogramQuantile(t *testing.T) {
	h := Histogram{Bounds: LatencyBuckets(), Counts: make([]uint64, len(latencyBounds)+1)}
	if q := h.quantile(0.9); q != 0 {
		t.Errorf("empty: %v", q)
	}
	// 10 calls in (100ms, 250ms], 10 in (1s, 2.5s].
	h.Counts[5], h.Counts[8], h.Count = 10, 10, 20
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.25, 175 * time.Millisecond}, {0.5, 250 * time.Millisecond}, {0.9, 2200 * time.Millisecond}, {1, 2500 * time.Millisecond}} {
		if got := h.quantile(c.q); got != c.want {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	h.Counts[len(h.Counts)-1]++
	h.Count++
	if got := h.quantile(1); got != time.Minute {
		t.Errorf("beyond the bounds: %v, want the last bound", got)
	}
}
