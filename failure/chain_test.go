package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"
)

// Error chains that never end (an Unwrap that returns its own error or an
// earlier one) or are huge: classification walks a bounded part of them.

func TestClassifyHostileChains(t *testing.T) {
	for _, tt := range hostileerr.Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			var got Class
			hostileerr.Promptly(t, "Classify", func() { got = Classify(tt.Err) })
			if got != Class(tt.Class) {
				t.Errorf("Classify = %q, want %q", got, tt.Class)
			}
		})
	}
}

// visits returns the errors walkErr visits in err.
func visits(err error) []error {
	var out []error
	Walk(err, func(e error) bool {
		out = append(out, e)
		return true
	})
	return out
}

func TestWalkErrBounds(t *testing.T) {
	self := &hostileerr.SelfLoop{Msg: "x"}
	if got := visits(self); len(got) != 1 || got[0] != self {
		t.Errorf("Unwrap returning itself: %d visits, want 1", len(got))
	}
	if got := visits(hostileerr.SelfValue{}); len(got) != 1 {
		t.Errorf("Unwrap returning itself, a value: %d visits, want 1", len(got))
	}
	two := hostileerr.Ring(2, "x")
	if got := visits(two); len(got) != 2 || got[0] != two || got[1] != two.Next {
		t.Errorf("two-error cycle: %v", got)
	}
	if got := visits(&hostileerr.SelfTree{Msg: "x"}); len(got) != 1 {
		t.Errorf("list holding itself: %d visits, want 1", len(got))
	}
	if got := len(visits(hostileerr.Ring(20, "x"))); got != maxErrDepth {
		t.Errorf("20-error cycle: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	// A tree of cycles longer than the ring: the bound on visits.
	rings := make(hostileerr.ListErr, 10)
	for i := range rings {
		rings[i] = hostileerr.Ring(20, "x")
	}
	if got := len(visits(rings)); got != maxErrVisits {
		t.Errorf("10 20-error cycles: %d visits, want the bound %d", got, maxErrVisits)
	}
	if got := len(visits(hostileerr.Deep(100_000, false))); got != maxErrDepth {
		t.Errorf("deep chain: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	if got := len(visits(hostileerr.Deep(100_000, true))); got != maxErrDepth {
		t.Errorf("deep tree: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	wide := make(hostileerr.ListErr, 1000)
	for i := range wide {
		wide[i] = fmt.Errorf("e%d", i)
	}
	if got := len(visits(wide)); got != maxErrVisits {
		t.Errorf("wide list: %d visits, want the bound %d", got, maxErrVisits)
	}
	// Ordinary chains: every error, depth first; an error met again
	// (leaf) is not visited again.
	leaf := errors.New("leaf")
	joined := fmt.Errorf("top: %w", errors.Join(fmt.Errorf("a: %w", leaf), leaf, io.EOF))
	got := visits(joined)
	want := []error{joined, errors.Unwrap(joined), errors.Unwrap(joined).(interface{ Unwrap() []error }).Unwrap()[0], leaf, io.EOF}
	if len(got) != len(want) {
		t.Fatalf("visits %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("visit %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// isErr is errors.Is, bounded: it agrees with errors.Is on ordinary
// chains, Is methods included.
func TestIsErr(t *testing.T) {
	canceledRing := hostileerr.Ring(3, "x")
	canceledRing.Next.Next.Canceled = true
	tests := []struct {
		err    error
		target error
		want   bool
		cyclic bool // errors.Is would not return
	}{
		{fmt.Errorf("a: %w", context.Canceled), context.Canceled, true, false},
		{fmt.Errorf("a: %w", context.DeadlineExceeded), context.Canceled, false, false},
		{errors.Join(io.EOF, fmt.Errorf("b: %w", context.Canceled)), context.Canceled, true, false},
		{&hostileerr.RingErr{Msg: "x", Canceled: true}, context.Canceled, true, false},
		{canceledRing, context.Canceled, true, true},
		{&hostileerr.SelfLoop{Msg: "x"}, context.Canceled, false, true},
		{nil, context.Canceled, false, false},
	}
	for i, tt := range tests {
		var got bool
		hostileerr.Promptly(t, "isErr", func() { got = Is(tt.err, tt.target) })
		if got != tt.want {
			t.Errorf("%d: Is(%v) = %v, want %v", i, tt.err, got, tt.want)
		}
		if !tt.cyclic && errors.Is(tt.err, tt.target) != tt.want {
			t.Errorf("%d: errors.Is disagrees", i)
		}
	}
}

// Walking an ordinary chain, and classifying it, allocates nothing.
func TestWalkErrAllocatesNothing(t *testing.T) {
	err := error(io.EOF)
	for i := range 7 {
		err = fmt.Errorf("layer %d: %w", i, err)
	}
	n := 0
	if a := testing.AllocsPerRun(100, func() {
		Walk(err, func(error) bool { n++; return true })
	}); a != 0 {
		t.Errorf("walkErr: %v allocations", a)
	}
	if n != 100*8+8 {
		t.Errorf("%d visits, want 8 a walk", n)
	}
	text := err.Error()
	var got Class
	if a := testing.AllocsPerRun(100, func() { got = classify(err, text) }); a != 0 {
		t.Errorf("classify: %v allocations", a)
	}
	if diff := cmp.Diff(ClassNetwork, got); diff != "" {
		t.Error(diff)
	}
}
