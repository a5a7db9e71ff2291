package failure_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// sdkError has the shape of the Stainless SDKs' *Error (openai-go,
// anthropic-sdk-go): the failed response in a field.
type sdkError struct {
	StatusCode int
	Response   *http.Response
}

func (e *sdkError) Error() string { return fmt.Sprintf("POST \"/v1/messages\": %d", e.StatusCode) }

// Issue 27: the wait a 429's headers ask for is read from the SDK's error
// itself, so that a call whose first attempt ran without
// selfimprove.Transport's hint (one attempt allowed by its config) still
// waits the Retry-After before the loop retries it.
func TestErrorWaitReadsTheSDKErrorsResponse(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "2")
	err := fmt.Errorf("call: %w", &sdkError{429, &http.Response{StatusCode: 429, Header: h}})
	if d, why := failure.ErrorWait(err); d != 2*time.Second || why != failure.WaitHeader+" retry-after" {
		t.Fatalf("ErrorWait = %v %q, want 2s from the header", d, why)
	}
	for _, e := range []error{&sdkError{429, nil}, sdkValue{}, &struct{ error }{fmt.Errorf("x")}} {
		if d, _ := failure.ErrorWait(e); d != 0 {
			t.Fatalf("ErrorWait(%T) = %v, want none", e, d)
		}
	}
}

// sdkValue is an error whose Response is not a pointer to a struct's
// field: not read.
type sdkValue struct{}

func (sdkValue) Error() string { return "429" }
