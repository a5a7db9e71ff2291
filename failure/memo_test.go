package failure

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// statusErr is an error with an HTTP status.
type statusErr struct {
	code int
	msg  string
}

func (e statusErr) Error() string   { return e.msg }
func (e statusErr) StatusCode() int { return e.code }

// direct is what the failure path derived before the memo: the text,
// class and cluster of err.
func direct(err error) (string, Class, uint64) {
	text := Text(err)
	var buf [4 * MaxSignature]byte
	sig := AppendSignature(buf[:0], text)
	return text, classify(err, text), ClusterOf(sig)
}

// memoized is the same through m.
func memoized(m *Memo, err error) (string, Class, uint64) {
	f := m.Describe(err, 0)
	return f.Text, f.Class, f.Cluster
}

// TestFailureMemoDerivesAlike: through the memo, every error gets the
// text, class and cluster it gets without it, whether the memo holds its
// text or another that shares its slot, and whatever the status beside
// the same text.
func TestFailureMemoDerivesAlike(t *testing.T) {
	errs := []error{
		errors.New("upstream 503 service unavailable"),
		errors.New("rate limit exceeded, retry later"),
		errors.New("auth failed for key sk-abcdefghijklmnopqrstuvwxyz0123456789"),
		errors.New(strings.Repeat("é", 900)),
		errors.New("context length exceeded: 9000 tokens"),
		statusErr{429, "upstream said no"},
		statusErr{503, "upstream said no"},
		statusErr{401, "upstream said no"},
		fmt.Errorf("call: %w", statusErr{500, "boom"}),
	}
	for i := range 300 { // more texts than slots: collisions
		errs = append(errs, fmt.Errorf("order %d failed: timeout after %dms", i, i*7))
	}
	m := NewMemo()
	for round := range 3 {
		for _, err := range errs {
			wt, wc, wcl := direct(err)
			gt, gc, gcl := memoized(m, err)
			if gt != wt || gc != wc || gcl != wcl {
				t.Fatalf("round %d, %q: memo (%q, %s, %x), direct (%q, %s, %x)", round, err, gt, gc, gcl, wt, wc, wcl)
			}
		}
	}
}

// TestFailureMemoAllocatesNothingOnAHit: a repeated failure text costs no
// allocation.
func TestFailureMemoAllocatesNothingOnAHit(t *testing.T) {
	m := NewMemo()
	var err error = statusErr{503, "upstream 503: the service is overloaded, request id 1234"}
	memoized(m, err)
	if n := testing.AllocsPerRun(100, func() { memoized(m, err) }); n != 0 {
		t.Fatalf("%v allocations a repeated failure", n)
	}
}

// FuzzFailureMemo: for any text and status, the memo derives what the
// failure path derives without it.
func FuzzFailureMemo(f *testing.F) {
	f.Add("upstream 503", 503)
	f.Add("token=abc123secret rate limited", 429)
	f.Add(strings.Repeat("x", 1100), 0)
	m := NewMemo()
	f.Fuzz(func(t *testing.T, msg string, code int) {
		var err error = errors.New(msg)
		if code != 0 {
			err = statusErr{code, msg}
		}
		for range 2 { // a miss, then a hit
			wt, wc, wcl := direct(err)
			gt, gc, gcl := memoized(m, err)
			if gt != wt || gc != wc || gcl != wcl {
				t.Fatalf("%q (%d): memo (%q, %s, %x), direct (%q, %s, %x)", msg, code, gt, gc, gcl, wt, wc, wcl)
			}
		}
	})
}
