package selfimprove

import (
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// fullStats returns the state of an agent whose statistics are as large
// as they get: every ring full, every failure text 200 bytes of control
// characters (six bytes each in JSON), as many clusters, outages and
// scored versions as an agent keeps.
func fullStats() agentState {
	s := newState("agent", Config{Version: 1, Params: map[string]string{"big": strings.Repeat("p", 1<<20)}})
	s.MaxVersion = maxQualityRecs
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 4000 {
		end += int64(time.Second)
		text := strings.Repeat(string(rune('a'+i%(2*maxClusters))), 8) + " " + strings.Repeat("\x01", failure.MaxText)
		sig := failure.AppendSignature(nil, text)
		cl := failure.ClusterOf(sig)
		s.Tracker.record(s.Gen, end, time.Second, i%2 == 0, 1, text, uint32(cl))
		if i%2 == 0 {
			s.observeCluster(cl, sig, failure.ClassOverloaded, text, end)
		}
	}
	s.Quality = &qualityBook{}
	for v := 1; v <= maxQualityRecs; v++ {
		s.Quality.Recs = append(s.Quality.Recs, qualityRec{Version: v, Route: strings.Repeat("r", 64), Scored: 1 << 40, Sum: 1e11, Squares: 1e10, Costed: 1 << 40, CostOK: 1 << 39, Cost: 1e12})
	}
	return s
}

// TestFleetStatsFit: the largest statistics an agent can have encode
// under maxFleetStats, so that every replica's are sent, and read back
// as they were.
func TestFleetStatsFit(t *testing.T) {
	s := fullStats()
	part := s.statsPart()
	b, err := encodeState(&part)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest statistics: %d bytes (%d clusters)", len(b), len(s.Clusters))
	if len(b) > maxFleetStats/2 {
		t.Fatalf("the largest statistics encode in %d bytes, more than half of maxFleetStats (%d)", len(b), maxFleetStats)
	}
	back, err := decodeState(b, "agent")
	if err != nil {
		t.Fatal(err)
	}
	var got agentState
	got.takeStats(&back)
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC).UnixNano()
	if a, b := s.Tracker.stats(now), got.Tracker.stats(now); a != b || len(got.Clusters) != len(s.Clusters) || len(got.Quality.Recs) != maxQualityRecs {
		t.Fatalf("read back: %+v, %d clusters, want %+v, %d", b, len(got.Clusters), a, len(s.Clusters))
	}
}

// BenchmarkFleetStats: what a replica spends on one agent's statistics
// (copied under the agent's lock, encoded outside it), at most once every
// 2 seconds per agent.
func BenchmarkFleetStats(b *testing.B) {
	s := fullStats()
	b.ReportAllocs()
	for b.Loop() {
		part := s.statsPart()
		if _, err := encodeState(&part); err != nil {
			b.Fatal(err)
		}
	}
}
