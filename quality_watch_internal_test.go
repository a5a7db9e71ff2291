package selfimprove

import (
	"math"
	"testing"
)

// TestFallReference: a fall seen in fewer than qualityMinRef scored
// calls is topped up to qualityMinRef with the config's other scores, at
// their mean and spread; a longer one is the reference as it is.
func TestFallReference(t *testing.T) {
	drop := Stats{Scored: 12, Quality: 0.5, QualitySD: 0.1}
	all := Stats{Scored: 512, Quality: (12*0.5 + 500*0.85) / 512, QualitySD: 0.2}
	ref := fallReference(drop, all)
	n, sum, sq := scoreSums(all)
	dn, dsum, dsq := scoreSums(drop)
	k := 8.0 / float64(n-dn)
	want := qualityRec{Scored: 20, Sum: dsum + k*(sum-dsum), Squares: dsq + k*(sq-dsq)}
	if ref.Scored != want.Scored || math.Abs(ref.Sum-want.Sum) > 1e-9 || math.Abs(ref.Squares-want.Squares) > 1e-9 {
		t.Errorf("topped up: %+v, want %+v", ref, want)
	}
	if m := ref.Sum / 20; math.Abs(m-(12*0.5+8*0.85)/20) > 1e-9 {
		t.Errorf("topped-up mean %v, want %v", m, (12*0.5+8*0.85)/20)
	}
	for _, c := range []struct {
		name      string
		drop, all Stats
	}{
		{"a long fall", Stats{Scored: 30, Quality: 0.5, QualitySD: 0.1}, all},
		{"no other score", drop, drop},
	} {
		n, sum, sq := scoreSums(c.drop)
		if got := fallReference(c.drop, c.all); got != (qualityRec{Scored: int64(n), Sum: sum, Squares: sq}) {
			t.Errorf("%s: %+v, want the fall's scores", c.name, got)
		}
	}
	// Fewer other scores than the top-up wants: all of them.
	if got := fallReference(drop, Stats{Scored: 15, Quality: (12*0.5 + 3*0.9) / 15}); got.Scored != 15 {
		t.Errorf("three other scores: %+v, want 15 scores", got)
	}
}

// TestWatchStart: a run starts against the established mean less a
// standard error and the drop, at the bet sized to the scores' spread;
// not before qualityWatchMin scores, nor when there is no fall to watch
// for (a mean m that would not be positive is not kept: the state file
// refuses one).
func TestWatchStart(t *testing.T) {
	var w qualityWatch
	rec := &qualityRec{Scored: 101, Sum: 100*0.85 + 0.4, Squares: 100*(0.85*0.85+0.15*0.15) + 0.16}
	if !w.start(rec, 1, 0.4, 0.16, 0.05) {
		t.Fatalf("no run started: %+v", w)
	}
	if m := 0.85 - 0.015 - 0.05; math.Abs(w.Mean-m) > 1e-9 || w.Bet != 0.9 {
		t.Errorf("run %+v, want mean %v and bet 0.9", w, m)
	}
	if w.start(&qualityRec{Scored: 50, Sum: 40, Squares: 35}, 1, 0.4, 0.16, 0.05) {
		t.Errorf("a run started on 49 scores before: %+v", w)
	}
	if w.start(&qualityRec{Scored: 101, Sum: 3, Squares: 1}, 1, 0, 0, 0.05) || w.Mean != 0 || w.Bet != 0 {
		t.Errorf("mean 0.03: %+v, want no run and no mean", w)
	}
}
