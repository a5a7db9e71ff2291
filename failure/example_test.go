package failure_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Classify names the kind of a failure from Go's own signals and the
// error's text; each class maps to a root cause.
func ExampleClassify() {
	for _, err := range []error{
		fmt.Errorf("calling model: %w", context.DeadlineExceeded),
		errors.New("RateLimitError: 429 Too Many Requests"),
		errors.New("request 14290 failed"),
		errors.New("400: This model's maximum context length is 8192 tokens"),
	} {
		c := failure.Classify(err)
		fmt.Println(c, c.RootCause())
	}
	// Output:
	// timeout tool_failure
	// rate_limit tool_failure
	// other reasoning_error
	// context_length context_loss
}

// Signature normalises a message for clustering; Scrub removes secrets
// before any text is kept.
func ExampleSignature() {
	fmt.Println(failure.Signature("Timeout after 30s on req 123"))
	fmt.Println(failure.Signature(`model "gpt-4o" not found at https://api.example.com/v1`))
	fmt.Println(failure.Scrub("auth failed for Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig, password=hunter2"))
	// Output:
	// timeout after <n>s on req <n>
	// model <str> not found at <url>
	// auth failed for Bearer <redacted>, password=<redacted>
}

// A Memo describes a failure as the loop keeps it: class, status,
// scrubbed text, signature and cluster. A status seen outside the error
// (by selfimprove.Transport) counts when the error reports none.
func ExampleMemo_Describe() {
	m := failure.NewMemo()
	f := m.Describe(errors.New("upstream said: service unavailable, request 8812, key sk-abcdefghijklmnop1234"), 503)
	fmt.Println(f.Class, f.Status)
	fmt.Println(f.Text)
	fmt.Println(f.Signature, failure.FormatClusterID(f.Cluster) == failure.ClusterID(f.Signature))
	// Output:
	// overloaded 503
	// upstream said: service unavailable, request 8812, key sk-<redacted>
	// upstream said: service unavailable, request <n>, key sk-<redacted> true
}
