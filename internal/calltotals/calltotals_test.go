package calltotals

import (
	"maps"
	"slices"
	"testing"
)

// agent is an agent's series label, ID and counts.
type agent struct {
	label, id string
	n         []int64
}

// collect runs one collection of agents, and returns the totals by label.
func collect(t *Totals, agents ...agent) map[string][]int64 {
	out := map[string][]int64{}
	t.Begin()
	defer t.End()
	for _, a := range agents {
		out[a.label] = slices.Clone(t.Add(a.label, a.id, a.n))
	}
	return out
}

// TestTotalsNeverGoDown: an agent loaded again (any of its counts lower)
// adds all its counts; _other keeps the counts of an agent that left it.
func TestTotalsNeverGoDown(t *testing.T) {
	tot := New(2)
	collect(tot, agent{"a", "a", []int64{3, 1}}, agent{Other, "b", []int64{4, 0}}, agent{Other, "c", []int64{1, 0}})
	// a evicted and loaded again: its first count is lower, its second
	// not, and both are new; c evicted.
	got := collect(tot, agent{"a", "a", []int64{1, 2}}, agent{Other, "b", []int64{5, 0}})
	if want := []int64{4, 3}; !slices.Equal(got["a"], want) {
		t.Errorf("a: %v, want %v", got["a"], want)
	}
	if want := []int64{6, 0}; !slices.Equal(got[Other], want) {
		t.Errorf("_other: %v, want %v", got[Other], want)
	}
}

// TestTotalsAbsentWithinRoom: Absent observes _other and the room most
// recently added to of the series no agent added to, and forgets the rest.
func TestTotalsAbsentWithinRoom(t *testing.T) {
	tot := New(1)
	for _, id := range []string{"a", "b", "c", Other} {
		collect(tot, agent{id, id, []int64{1}})
	}
	tot.Begin()
	tot.Add("d", "d", []int64{2})
	seen := map[string]int64{}
	tot.Absent(1, func(label string, n []int64) { seen[label] = n[0] })
	tot.End()
	if want := map[string]int64{"c": 1, Other: 1}; !maps.Equal(seen, want) {
		t.Errorf("Absent observed %v, want %v", seen, want)
	}
	if _, ok := tot.total["b"]; ok || len(tot.total) != 3 {
		t.Errorf("totals kept: %v, want c, d and _other", tot.total)
	}
}

// TestTotalsAddAllocationFree: a collection of agents seen before
// allocates nothing.
func TestTotalsAddAllocationFree(t *testing.T) {
	tot := New(3)
	cur := []int64{1, 2, 3}
	collect(tot, agent{"a", "a", cur})
	if n := testing.AllocsPerRun(100, func() {
		tot.Begin()
		tot.Add("a", "a", cur)
		tot.End()
	}); n != 0 {
		t.Errorf("%v allocations a collection", n)
	}
}
