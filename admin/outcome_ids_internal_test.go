package admin

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestOutcomeIDSentAgainWhileBooked: a client that timed out sends its
// outcome again while the loop is still booking the first send. The
// second request waits for the first: booked, it is a duplicate; not
// booked (the loop failed), the second books it. Driven by synctest: the
// second claim is blocked before the first is done, in every run.
func TestOutcomeIDSentAgainWhileBooked(t *testing.T) {
	for _, booked := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			m := newOutcomeIDs(4)
			k, dup, err := m.claim(t.Context(), "a", "id-1")
			if dup || err != nil {
				t.Fatalf("first claim: dup %v, %v", dup, err)
			}
			type got struct {
				dup bool
				err error
			}
			second := make(chan got, 1)
			go func() {
				k2, dup, err := m.claim(t.Context(), "a", "id-1")
				if !dup && err == nil {
					m.done(k2, true)
				}
				second <- got{dup, err}
			}()
			synctest.Wait() // the second claim waits for the first
			select {
			case g := <-second:
				t.Fatalf("the second send did not wait for the first: %+v", g)
			default:
			}
			m.done(k, booked)
			if g := <-second; g.dup != booked || g.err != nil {
				t.Errorf("first booked %v: the second send got dup %v, %v; want dup %v", booked, g.dup, g.err, booked)
			}
			if _, dup, _ := m.claim(t.Context(), "a", "id-1"); !dup {
				t.Error("a third send is not a duplicate")
			}
		})
	}
}

// TestOutcomeIDWaitEndsWithTheRequest: a request that waits for another
// to book the same outcome stops waiting when its own context ends.
func TestOutcomeIDWaitEndsWithTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newOutcomeIDs(4)
		if _, _, err := m.claim(t.Context(), "a", "id-1"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { _, _, err := m.claim(ctx, "a", "id-1"); done <- err }()
		synctest.Wait()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("got %v; want context.Canceled", err)
		}
	})
}

// TestOutcomeIDsForgetTheOldest: the memory keeps the last max IDs
// booked; an ID of another agent is another outcome.
func TestOutcomeIDsForgetTheOldest(t *testing.T) {
	ctx := t.Context()
	m := newOutcomeIDs(2)
	for _, id := range []string{"1", "2", "3"} {
		k, dup, _ := m.claim(ctx, "a", id)
		if dup {
			t.Fatalf("%s: a duplicate at its first send", id)
		}
		m.done(k, true)
	}
	for id, want := range map[string]bool{"1": false, "2": true, "3": true} {
		k, dup, _ := m.claim(ctx, "a", id)
		if dup != want {
			t.Errorf("ID %s: duplicate %v; want %v", id, dup, want)
		}
		if !dup {
			m.done(k, false)
		}
	}
	if _, dup, _ := m.claim(ctx, "b", "2"); dup {
		t.Error("agent b's ID 2 taken for agent a's")
	}
	if len(m.set) != 2 || len(m.ring) != 2 {
		t.Errorf("%d keys kept in a memory of 2", len(m.set))
	}
}
