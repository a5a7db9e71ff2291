package selfimprove

import (
	"context"
	"strings"
	"testing"
)

// TestFrontCaches: a call finds its agent through the cache by address
// with the very string it was created with, and through the cache by hash
// with an equal string built afresh; neither cache hands out an evicted
// agent, nor another agent whose ID shares the address's slot.
func TestFrontCaches(t *testing.T) {
	l, err := New(WithStore(NewRAMStore()), WithNotifier(nil), WithLogger(discardLogger()), WithMaxAgents(2))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ok := func(context.Context, Config) error { return nil }
	const id = "summarizer"
	call := func(id string) *agent {
		t.Helper()
		if _, err := l.ExecuteWithImprovement(ctx, id, ok); err != nil {
			t.Fatal(err)
		}
		a, err := l.agent(id)
		if err != nil || a == nil {
			t.Fatalf("agent(%q) = %v, %v", id, a, err)
		}
		return a
	}
	first := call(id)
	call(id) // the cache by hash hits, and hands the agent to the one by address
	if e := &l.frontAt[atSlot(addrOf(id))]; e.a.Load() != first || e.key.Load() != addrOf(id) {
		t.Fatal("the agent did not enter the cache by address")
	}
	fresh := strings.Clone(id)
	if got := call(fresh); got != first {
		t.Fatal("an equal string built afresh found another agent")
	}
	if e := &l.frontAt[atSlot(addrOf(fresh))]; e.a.Load() == first && e.key.Load() == addrOf(fresh) {
		t.Fatal("a string the agent was not created with entered the cache by address")
	}

	// A prefix shares the address (and maybe the slot) of id: it is
	// another agent.
	if got := call(id[:3]); got == first || got.id != "sum" {
		t.Fatalf("the prefix %q found agent %q", id[:3], got.id)
	}

	// Evicted: both caches still hold the agent, marked gone; the next call
	// gets the live one.
	call(id)
	if l.frontAt[atSlot(addrOf(id))].a.Load() != first {
		t.Fatal("the agent did not enter the cache by address again")
	}
	for _, other := range []string{"a", "b", "c", "d"} {
		call(other)
	}
	if !first.has(flagGone) {
		t.Fatal("the agent was not evicted (test setup)")
	}
	again := call(id)
	if again == first || again.has(flagGone) {
		t.Fatal("a front cache handed out an evicted agent")
	}
	if st := l.Stats(id); st.Calls != 5 {
		t.Fatalf("stats after eviction = %+v; want the 5 calls", st)
	}
}
