package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Error chains that never end (an Unwrap that returns its own error or an
// earlier one) or are huge: classification walks a bounded part of them.

// selfLoop unwraps to itself.
type selfLoop struct{ msg string }

func (e *selfLoop) Error() string { return e.msg }
func (e *selfLoop) Unwrap() error { return e }

// selfValue unwraps to itself, as a comparable value.
type selfValue struct{}

func (selfValue) Error() string   { return "rate limit exceeded" }
func (e selfValue) Unwrap() error { return e }

// ringErr is one of a cycle of errors; canceled makes it report
// context.Canceled through an Is method.
type ringErr struct {
	msg      string
	next     *ringErr
	canceled bool
}

func (e *ringErr) Error() string             { return e.msg }
func (e *ringErr) Unwrap() error             { return e.next }
func (e *ringErr) Is(target error) bool      { return e.canceled && target == context.Canceled }
func (e *ringErr) RetryAfter() time.Duration { return 7 * time.Second }

// ring returns the first of n errors, each unwrapping to the next and the
// last to the first.
func ring(n int, msg string) *ringErr {
	first := &ringErr{msg: msg}
	e := first
	for range n - 1 {
		e.next = &ringErr{msg: msg}
		e = e.next
	}
	e.next = first
	return first
}

// selfTree unwraps to a list that holds itself twice: a walk that does not
// notice visits 2^depth errors.
type selfTree struct{ msg string }

func (e *selfTree) Error() string   { return e.msg }
func (e *selfTree) Unwrap() []error { return []error{e, e} }

// listErr is not comparable: a list that may hold itself.
type listErr []error

func (listErr) Error() string     { return "rate limit exceeded" }
func (l listErr) Unwrap() []error { return l }

// holder is of a comparable type, but holds a value that is not: comparing
// two holders panics.
type holder struct{ inner error }

func (holder) Error() string   { return "rate limit exceeded" }
func (h holder) Unwrap() error { return h }

// chainLink is one link of a long chain.
type chainLink struct{ next error }

func (*chainLink) Error() string   { return "deep chain" }
func (e *chainLink) Unwrap() error { return e.next }

// treeLink is one node of a deep tree of lists.
type treeLink struct{ next error }

func (*treeLink) Error() string     { return "deep tree" }
func (e *treeLink) Unwrap() []error { return []error{e.next} }

// deep returns a chain of n links of kind ending in context.Canceled.
func deep(n int, tree bool) error {
	var err error = context.Canceled
	for range n {
		if tree {
			err = &treeLink{err}
		} else {
			err = &chainLink{err}
		}
	}
	return err
}

// hostileErrors are errors whose chains never end or are huge, with the
// class each must get.
func hostileErrors() []struct {
	name string
	err  error
	want Class
} {
	self := listErr{nil}
	self[0] = self // the list holds itself
	wide := make(listErr, 1_000_000)
	for i := range wide {
		wide[i] = &selfLoop{"x"}
	}
	return []struct {
		name string
		err  error
		want Class
	}{
		{"Unwrap returns itself", &selfLoop{"rate limit exceeded"}, ClassRateLimit},
		{"Unwrap returns itself, a value", selfValue{}, ClassRateLimit},
		{"two-error cycle", ring(2, "rate limit exceeded"), ClassRateLimit},
		{"20-error cycle", ring(20, "rate limit exceeded"), ClassRateLimit},
		{"cycle through an error that is context.Canceled", func() error {
			r := ring(3, "rate limit exceeded")
			r.next.canceled = true
			return r
		}(), ClassCanceled},
		{"Unwrap() []error returns itself twice", &selfTree{"rate limit exceeded"}, ClassRateLimit},
		{"a list that holds itself", self, ClassRateLimit},
		{"a holder of an uncomparable value", holder{self}, ClassRateLimit},
		{"a list of a million", wide, ClassRateLimit},
		{"a chain 100,000 deep", deep(100_000, false), ClassOther},
		{"a tree 100,000 deep", deep(100_000, true), ClassOther},
	}
}

func TestClassifyHostileChains(t *testing.T) {
	for _, tt := range hostileErrors() {
		t.Run(tt.name, func(t *testing.T) {
			var got Class
			promptly(t, "Classify", func() { got = Classify(tt.err) })
			if got != tt.want {
				t.Errorf("Classify = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRedeliverHostileChains(t *testing.T) {
	for _, tt := range hostileErrors() {
		t.Run(tt.name, func(t *testing.T) {
			var (
				retry bool
				after time.Duration
			)
			promptly(t, "redeliver", func() { retry, after = redeliver(tt.err), retryAfter(tt.err) })
			wantAfter := time.Duration(0)
			if _, ok := tt.err.(*ringErr); ok {
				wantAfter = 7 * time.Second
			}
			if retry || after != wantAfter {
				t.Errorf("redeliver = %v, retryAfter = %v; want false, %v", retry, after, wantAfter)
			}
		})
	}
}

// A call whose fn fails with such an error returns it, at once.
func TestCallWithHostileChains(t *testing.T) {
	// The ring errors ask for a 7s wait (RetryAfter), which the retry
	// honours: on a simulated clock that waits without sleeping.
	l, err := New(WithMemoryStore(), WithNotifier(nil), WithStrategy(nil), WithClock(fakeclock.New(time.Unix(0, 0))),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Two attempts: the failure is classified for the retry as well.
	if err := l.SetConfig("a", Config{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range hostileErrors() {
		if _, ok := tt.err.(interface{ Unwrap() error }); !ok {
			continue // lists: not comparable, checked by Classify alone
		}
		if _, ok := tt.err.(holder); ok {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			var (
				rep Report
				got error
			)
			promptly(t, "ExecuteWithImprovement", func() {
				rep, got = l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, Config) error { return tt.err })
			})
			if got != tt.err || rep.Attempts != 2 {
				t.Errorf("returned %v after %d attempts, want fn's error after 2", got, rep.Attempts)
			}
		})
	}
}

// visits returns the errors walkErr visits in err.
func visits(err error) []error {
	var out []error
	walkErr(err, func(e error) bool {
		out = append(out, e)
		return true
	})
	return out
}

func TestWalkErrBounds(t *testing.T) {
	self := &selfLoop{"x"}
	if got := visits(self); len(got) != 1 || got[0] != self {
		t.Errorf("Unwrap returning itself: %d visits, want 1", len(got))
	}
	if got := visits(selfValue{}); len(got) != 1 {
		t.Errorf("Unwrap returning itself, a value: %d visits, want 1", len(got))
	}
	two := ring(2, "x")
	if got := visits(two); len(got) != 2 || got[0] != two || got[1] != two.next {
		t.Errorf("two-error cycle: %v", got)
	}
	if got := visits(&selfTree{"x"}); len(got) != 1 {
		t.Errorf("list holding itself: %d visits, want 1", len(got))
	}
	if got := len(visits(ring(20, "x"))); got != maxErrDepth {
		t.Errorf("20-error cycle: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	// A tree of cycles longer than the ring: the bound on visits.
	rings := make(listErr, 10)
	for i := range rings {
		rings[i] = ring(20, "x")
	}
	if got := len(visits(rings)); got != maxErrVisits {
		t.Errorf("10 20-error cycles: %d visits, want the bound %d", got, maxErrVisits)
	}
	if got := len(visits(deep(100_000, false))); got != maxErrDepth {
		t.Errorf("deep chain: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	if got := len(visits(deep(100_000, true))); got != maxErrDepth {
		t.Errorf("deep tree: %d visits, want the depth bound %d", got, maxErrDepth)
	}
	wide := make(listErr, 1000)
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
	canceledRing := ring(3, "x")
	canceledRing.next.next.canceled = true
	tests := []struct {
		err    error
		target error
		want   bool
		cyclic bool // errors.Is would not return
	}{
		{fmt.Errorf("a: %w", context.Canceled), context.Canceled, true, false},
		{fmt.Errorf("a: %w", context.DeadlineExceeded), context.Canceled, false, false},
		{errors.Join(io.EOF, fmt.Errorf("b: %w", context.Canceled)), context.Canceled, true, false},
		{&ringErr{msg: "x", canceled: true}, context.Canceled, true, false},
		{canceledRing, context.Canceled, true, true},
		{&selfLoop{"x"}, context.Canceled, false, true},
		{nil, context.Canceled, false, false},
	}
	for i, tt := range tests {
		var got bool
		promptly(t, "isErr", func() { got = isErr(tt.err, tt.target) })
		if got != tt.want {
			t.Errorf("%d: isErr(%v) = %v, want %v", i, tt.err, got, tt.want)
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
		walkErr(err, func(error) bool { n++; return true })
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
