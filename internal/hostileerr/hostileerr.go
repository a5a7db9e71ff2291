// Package hostileerr holds errors whose chains never end or are huge:
// fixtures for the tests of the failure package and of the Loop, which
// must walk a bounded part of them and never hang or panic.
package hostileerr

import (
	"context"
	"testing"
	"time"
)

// SelfLoop unwraps to itself.
type SelfLoop struct{ Msg string }

func (e *SelfLoop) Error() string { return e.Msg }
func (e *SelfLoop) Unwrap() error { return e }

// SelfValue unwraps to itself, as a comparable value.
type SelfValue struct{}

func (SelfValue) Error() string   { return "rate limit exceeded" }
func (e SelfValue) Unwrap() error { return e }

// RingErr is one of a cycle of errors; canceled makes it report
// context.Canceled through an Is method.
type RingErr struct {
	Msg      string
	Next     *RingErr
	Canceled bool
}

func (e *RingErr) Error() string             { return e.Msg }
func (e *RingErr) Unwrap() error             { return e.Next }
func (e *RingErr) Is(target error) bool      { return e.Canceled && target == context.Canceled }
func (e *RingErr) RetryAfter() time.Duration { return 7 * time.Second }

// ring returns the first of n errors, each unwrapping to the next and the
// last to the first.
func Ring(n int, msg string) *RingErr {
	first := &RingErr{Msg: msg}
	e := first
	for range n - 1 {
		e.Next = &RingErr{Msg: msg}
		e = e.Next
	}
	e.Next = first
	return first
}

// SelfTree unwraps to a list that holds itself twice: a walk that does not
// notice visits 2^depth errors.
type SelfTree struct{ Msg string }

func (e *SelfTree) Error() string   { return e.Msg }
func (e *SelfTree) Unwrap() []error { return []error{e, e} }

// ListErr is not comparable: a list that may hold itself.
type ListErr []error

func (ListErr) Error() string     { return "rate limit exceeded" }
func (l ListErr) Unwrap() []error { return l }

// Holder is of a comparable type, but holds a value that is not: comparing
// two holders panics.
type Holder struct{ Inner error }

func (Holder) Error() string   { return "rate limit exceeded" }
func (h Holder) Unwrap() error { return h }

// ChainLink is one link of a long chain.
type ChainLink struct{ Next error }

func (*ChainLink) Error() string   { return "deep chain" }
func (e *ChainLink) Unwrap() error { return e.Next }

// TreeLink is one node of a deep tree of lists.
type TreeLink struct{ Next error }

func (*TreeLink) Error() string     { return "deep tree" }
func (e *TreeLink) Unwrap() []error { return []error{e.Next} }

// deep returns a chain of n links of kind ending in context.Canceled.
func Deep(n int, tree bool) error {
	var err error = context.Canceled
	for range n {
		if tree {
			err = &TreeLink{Next: err}
		} else {
			err = &ChainLink{Next: err}
		}
	}
	return err
}

// Case is a named hostile error.
type Case struct {
	Name string
	Err  error
	// Class is the failure class it must get (a failure.Class).
	Class string
}

// Cases are errors whose chains never end or are huge, each with the
// class it must get.
func Cases() []Case {
	self := ListErr{nil}
	self[0] = self // the list holds itself
	wide := make(ListErr, 1_000_000)
	for i := range wide {
		wide[i] = &SelfLoop{Msg: "x"}
	}
	return []Case{
		{"Unwrap returns itself", &SelfLoop{Msg: "rate limit exceeded"}, "rate_limit"},
		{"Unwrap returns itself, a value", SelfValue{}, "rate_limit"},
		{"two-error cycle", Ring(2, "rate limit exceeded"), "rate_limit"},
		{"20-error cycle", Ring(20, "rate limit exceeded"), "rate_limit"},
		{"cycle through an error that is context.Canceled", func() error {
			r := Ring(3, "rate limit exceeded")
			r.Next.Canceled = true
			return r
		}(), "canceled"},
		{"Unwrap() []error returns itself twice", &SelfTree{Msg: "rate limit exceeded"}, "rate_limit"},
		{"a list that holds itself", self, "rate_limit"},
		{"a Holder of an uncomparable value", Holder{Inner: self}, "rate_limit"},
		{"a list of a million", wide, "rate_limit"},
		{"a chain 100,000 deep", Deep(100_000, false), "other"},
		{"a tree 100,000 deep", Deep(100_000, true), "other"},
	}
}

// Promptly runs f and fails t if it does not return within 5 s: a walk
// that does not bound itself hangs instead of failing.
func Promptly(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return within 5s", what)
	}
}

// BadUnwrap panics in Unwrap and Is, as a nil pointer's methods can.
type BadUnwrap struct{}

func (BadUnwrap) Error() string { return "rate limit" }
func (BadUnwrap) Unwrap() error { panic("nil pointer") }
func (BadUnwrap) Is(error) bool { panic("nil pointer") }
