package selfimprove_test

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"
)

// hugeErr is an SDK error that holds a whole response.
type hugeErr struct{ body []byte }

func (e *hugeErr) Error() string { return "status 500: " + string(e.body[:64]) }

// The loop keeps what it needs of failed calls as bounded text, never
// their error values: 40 calls failing with errors that hold 1 MiB each
// leave none of them alive once the caller drops them. Before, the last
// 16 stayed reachable from the loop (its recent failures, kept to tell a
// nested call's failure apart): +15.2 MB on the heap.
func TestKeptFailuresHoldNoErrorValues(t *testing.T) {
	e := newEnv(t)
	var alive []weak.Pointer[hugeErr]
	for range 40 {
		err := &hugeErr{body: []byte(strings.Repeat("x", 1<<20))}
		alive = append(alive, weak.Make(err))
		e.call("sdk-agent", err, time.Millisecond)
	}
	runtime.GC()
	runtime.GC()
	held := 0
	for _, p := range alive {
		if p.Value() != nil {
			held++
		}
	}
	if held > 0 {
		t.Fatalf("%d of the 40 failed calls' errors (1 MiB each) are still held by the loop", held)
	}
}
