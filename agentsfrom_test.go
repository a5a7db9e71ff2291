package selfimprove_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestAgentsFrom: paging with AgentsFrom gives every agent the loop
// knows, in memory or only in the store, once and in byte order.
func TestAgentsFrom(t *testing.T) {
	e := newEnv(t)
	for i := range 30 {
		e.call(fmt.Sprintf("s%02d", i), nil, time.Millisecond)
	}
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	for i := range 10 { // in memory; s05 and s07 also in the store
		e.call(fmt.Sprintf("m%02d", i), nil, time.Millisecond)
	}
	e.call("s05", nil, time.Millisecond)
	e.call("s07", nil, time.Millisecond)
	want := slices.Sorted(e.l.Agents())
	if len(want) != 40 {
		t.Fatalf("Agents: %d %q", len(want), want)
	}
	for _, n := range []int{1, 3, 7, 40, 100} {
		var got []string
		from := ""
		for {
			page := e.l.AgentsFrom(from, n)
			got = append(got, page...)
			if len(page) < n {
				break
			}
			from = page[len(page)-1] + "\x00"
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d: %q, want %q", n, got, want)
		}
	}
	if got := e.l.AgentsFrom("s", 2); !slices.Equal(got, []string{"s00", "s01"}) {
		t.Errorf(`AgentsFrom("s", 2) = %q`, got)
	}
}
