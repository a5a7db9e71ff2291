package selfimprove_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// A call ID is bound to its agent by a keyed check: another agent's IDs
// and made-up ones are refused (but for one in 65,536), and an agent's
// own IDs stay valid across a restart. Before, the check byte was
// unkeyed and named no agent: another agent's IDs were all accepted, and
// one made-up ID in 256.
func TestCallIDsBoundToTheirAgent(t *testing.T) {
	e := newEnv(t)
	a := e.call("a", nil, time.Millisecond)
	b := e.call("b", nil, time.Millisecond)
	idA, _ := strconv.ParseUint(a.CallID(), 16, 64)
	idB, _ := strconv.ParseUint(b.CallID(), 16, 64)
	if err := e.l.Score("a", idB, 1); !errors.Is(err, si.ErrUnknownCall) {
		t.Fatalf("a score of agent a by b's call ID: %v, want ErrUnknownCall", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	const tries = 20000
	for range tries {
		// Made up: the version and time of a's real call, another check.
		id := idA&(1<<48-1) | rng.Uint64()<<48
		if id != idA && e.l.Score("a", id, 1) == nil {
			accepted++
		}
	}
	if accepted > 3 { // 0.3 expected
		t.Fatalf("%d of %d made-up call IDs accepted", accepted, tries)
	}
	e.l.Close()
	e.open()
	if err := e.l.Score("a", idA, 1); err != nil {
		t.Fatalf("a's own call ID after a restart: %v", err)
	}
	if err := e.l.Score("b", idB, 1); err != nil {
		t.Fatalf("b's own call ID after a restart: %v", err)
	}
}

// AddScore with a context kept after fn returned says the score was not
// booked; before, it returned nil and the score was lost.
func TestAddScoreAfterTheCallSaysSo(t *testing.T) {
	e := newEnv(t)
	if err := e.l.AddScore(context.Background(), 0); !errors.Is(err, si.ErrUnknownCall) {
		t.Fatalf("AddScore outside a call: %v", err)
	}
	var kept context.Context
	if _, err := e.l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ si.Config) error {
		kept = ctx
		return e.l.AddScore(ctx, 0.9)
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.l.AddScore(kept, 0.1); !errors.Is(err, si.ErrScoreTooLate) {
		t.Fatalf("AddScore after the call was booked: %v, want ErrScoreTooLate", err)
	}
	if v, _ := e.l.View("a"); v.Versions[1].Scored != 1 || v.Versions[1].Quality != 0.9 {
		t.Fatalf("scores booked: %+v, want the one given in the call", v.Versions[1])
	}
}
