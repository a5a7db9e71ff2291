package selfimprove

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Transport returns an http.RoundTripper that sends each request through
// base (nil: http.DefaultTransport) and tells the loop, when the request
// was made within an attempt of ExecuteWithImprovement, the HTTP status
// of a failed response and the wait its headers ask for (see
// HeaderWait). The loop then waits at least that long before the next
// attempt, and returns at once when the wait would pass the caller's
// deadline. Install it in any SDK's HTTP client:
//
//	option.WithHTTPClient(&http.Client{Transport: selfimprove.Transport(nil)})
//
// The response is passed on unchanged; outside an attempt the transport
// only forwards requests. Turn the SDK's own retries off, so that the
// loop sees every failure.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.StatusCode >= 400 {
		if h, _ := req.Context().Value(hintKey{}).(*hintCtx); h != nil {
			d, why := failure.HeaderWait(resp.Header, resp.StatusCode, time.Now())
			h.set(resp.StatusCode, d, why)
		}
	}
	return resp, err
}

type hintKey struct{}

// hintCtx is an attempt's context: its parent, plus what Transport saw
// of the attempt's failed responses.
type hintCtx struct {
	context.Context
	mu     sync.Mutex
	status int
	wait   time.Duration
	why    string
}

// Value returns h itself for hintKey.
func (h *hintCtx) Value(k any) any {
	if k == (hintKey{}) {
		return h
	}
	return h.Context.Value(k)
}

// set records a failed response: its status, and its wait when it is the
// longest of the attempt.
func (h *hintCtx) set(status int, d time.Duration, why string) {
	h.mu.Lock()
	h.status = status
	if d > h.wait {
		h.wait, h.why = d, why
	}
	h.mu.Unlock()
}

// take returns what was recorded since the last take and clears it.
func (h *hintCtx) take() (status int, d time.Duration, why string) {
	if h == nil {
		return 0, 0, ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	status, d, why = h.status, h.wait, h.why
	h.status, h.wait, h.why = 0, 0, ""
	return status, d, why
}
