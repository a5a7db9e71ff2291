package replica

import (
	"slices"
	"testing"
)

// TestQueue: Push refuses past Max, PushDrop and Requeue drop the oldest,
// Take empties it, Requeue puts items back before newer ones.
func TestQueue(t *testing.T) {
	q := Queue[int]{Max: 3}
	for i := range 3 {
		if !q.Push(i) {
			t.Fatalf("Push(%d) refused below Max", i)
		}
	}
	if q.Push(3) {
		t.Fatal("Push past Max accepted")
	}
	got := q.Take()
	if !slices.Equal(got, []int{0, 1, 2}) || len(q.Take()) != 0 {
		t.Fatalf("Take: %v, then not empty", got)
	}
	q.PushDrop(10)
	q.Requeue([]int{7, 8, 9})
	if got := q.Take(); !slices.Equal(got, []int{8, 9, 10}) {
		t.Fatalf("Requeue before newer, oldest dropped: %v, want [8 9 10]", got)
	}
	if n := q.PushDrop(1, 2, 3, 4, 5); n != 2 {
		t.Fatalf("PushDrop dropped %d, want 2", n)
	}
	if got := q.Take(); !slices.Equal(got, []int{3, 4, 5}) {
		t.Fatalf("PushDrop kept %v, want the newest [3 4 5]", got)
	}
}
