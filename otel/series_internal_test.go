package otel

import (
	"fmt"
	"sync"
	"testing"
)

// TestAgentSeriesBoundedAndAllocationFree: the duration histogram's cap on
// agents (before, it had none: every agent ID made a series) holds under
// concurrent calls, admitting exactly limit agents however many race for
// the last places, and finding an agent's series allocates nothing.
func TestAgentSeriesBoundedAndAllocationFree(t *testing.T) {
	const limit, goroutines, ids = 50, 8, 200
	s := newAgentSeries(limit)
	var wg sync.WaitGroup
	own := make([]int, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range ids {
				if s.of(fmt.Sprintf("agent-%d", (i*7+g)%ids)) != s.other {
					own[g]++
				}
			}
		})
	}
	wg.Wait()
	if len(s.known) != limit {
		t.Fatalf("%d agents with their own series, want %d", len(s.known), limit)
	}
	var first string
	for id := range s.known {
		first = id
		break
	}
	known, stranger := s.of(first), s.of("stranger")
	if known == s.other || stranger != s.other {
		t.Fatalf("a known agent under _other, or a new one admitted past the cap")
	}
	allocs := testing.AllocsPerRun(100, func() {
		if s.of(first) != known || s.of("stranger") != s.other {
			t.Fatal("series changed")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations to find a series", allocs)
	}
}
