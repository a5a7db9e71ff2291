package failure

import "reflect"

// The bounds of Walk. A chain of errors is the caller's: an Unwrap may
// return its own error or an earlier one (a cycle, which errors.Is and
// errors.As walk forever), and a chain or tree may be of any size.
const (
	maxErrDepth  = 32 // errors from err to the deepest one visited
	maxErrVisits = 64 // errors visited in all
	errSeenRing  = 8  // the last comparable errors visited, for cycles
)

// errWalk is the state of one Walk, kept on the stack.
type errWalk struct {
	f      func(error) bool
	visits int
	seen   [errSeenRing]error
	next   int // seen's next slot, mod errSeenRing
}

// Walk calls f for err and each error it wraps (Unwrap() error and
// Unwrap() []error), depth first, until f returns false. It visits at most
// maxErrVisits errors, none deeper than maxErrDepth, and does not visit an
// error again when it equals one of the last errSeenRing visited (so that a
// cycle of up to that many comparable errors is walked once). It
// allocates nothing.
func Walk(err error, f func(error) bool) {
	w := errWalk{f: f}
	w.walk(err, 0)
}

// walk visits e and what it wraps, e at depth; it reports false when the
// walk is over.
func (w *errWalk) walk(e error, depth int) bool {
	for ; e != nil; depth++ {
		if depth >= maxErrDepth || w.seenBefore(e) {
			return true
		}
		if w.visits++; w.visits > maxErrVisits {
			return false
		}
		if !w.f(e) {
			return false
		}
		switch x := e.(type) {
		case interface{ Unwrap() error }:
			e = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				if !w.walk(c, depth+1) {
					return false
				}
			}
			return true
		default:
			return true
		}
	}
	return true
}

// seenBefore reports whether e equals one of the last errors visited, and
// remembers it if it is comparable.
func (w *errWalk) seenBefore(e error) bool {
	if !reflect.TypeOf(e).Comparable() {
		return false
	}
	for i := range min(w.next, errSeenRing) {
		if sameErr(w.seen[i], e) {
			return true
		}
	}
	w.seen[w.next%errSeenRing] = e
	w.next++
	return false
}

// sameErr reports whether a == b. A value of a comparable type can still
// hold one that is not (a struct with an error field holding a slice):
// comparing two such values panics, and they count as different.
func sameErr(a, b error) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Is is errors.Is(err, target) for a target that is comparable, on a
// chain walked by Walk: bounded, where errors.Is walks a cycle forever.
// Like errors.Is, it asks each error's Is method too.
func Is(err, target error) bool {
	found := false
	Walk(err, func(e error) bool {
		if e == target {
			found = true
		} else if x, ok := e.(interface{ Is(error) bool }); ok {
			found = x.Is(target)
		}
		return !found
	})
	return found
}
