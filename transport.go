package selfimprove

import (
	"net/http"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Transport returns an http.RoundTripper that sends each request through
// base (nil: http.DefaultTransport) and tells the loop, when the request
// was made within an attempt of ExecuteWithImprovement, the HTTP status
// of a failed response and the wait its headers ask for (see
// failure.HeaderWait). The loop then waits at least that long before the next
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
		if h, _ := req.Context().Value(callKey{}).(*callCtx); h != nil {
			d, why := failure.HeaderWait(resp.Header, resp.StatusCode, time.Now())
			h.set(resp.StatusCode, d, why)
		}
	}
	return resp, err
}
