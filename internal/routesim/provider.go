package routesim

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// answer is a scripted provider answer: its kind and its latency (to
// its headers); for a streamed request answered OK, the stream's shape
// (nil: a whole answer at once); reset, a connection reset before any
// headers.
type answer struct {
	kind    Kind
	latency time.Duration
	stream  *shape
	reset   bool
}

// fine is a completion after lat.
func fine(lat time.Duration) answer { return answer{kind: OK, latency: lat} }

// script answers a request for model at simulated time t.
type script func(model string, t time.Time) answer

// request is one request the provider saw.
type request struct {
	at     time.Time
	model  string
	key    string // the API key: one per agent
	status int
}

// The headers the simulated network adds: the client's API key on a
// request, the answer's latency on a response.
const (
	keyHeader     = "X-Sim-Key"
	latencyHeader = "X-Sim-Latency"
)

// provider is the local server and the simulated network in front of it:
// a request whose latency exceeds the attempt's timeout ends with
// context.DeadlineExceeded after the timeout, as a real one would.
type provider struct {
	sdk    SDK
	clk    *fakeclock.Clock
	srv    *httptest.Server
	script script
	mu     sync.Mutex
	reqs   []request
}

// newProvider starts a provider that answers by sc on clk, in the SDK's
// bodies and headers; the test closes it.
func newProvider(t *testing.T, sdk SDK, clk *fakeclock.Clock, sc script) *provider {
	p := &provider{sdk: sdk, clk: clk, script: sc}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// serve answers one request by the script, and notes it.
func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	json.Unmarshal(body, &req)
	now := p.clk.Now()
	p.mu.Lock() // a script may keep state
	a := p.script(req.Model, now)
	rep := p.sdk.Reply(a.kind, req.Model, now)
	p.reqs = append(p.reqs, request{now, req.Model, r.Header.Get(keyHeader), rep.Status})
	p.mu.Unlock()
	if a.reset {
		// The connection closed under the request, before any headers.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not a clean close
			}
			conn.Close()
		}
		return
	}
	w.Header().Set(latencyHeader, a.latency.String())
	if req.Stream && a.kind == OK {
		sh := a.stream
		if sh == nil {
			sh = &shape{first: tokenGap}
		}
		p.sdk.Stream.serveStream(w, sh)
		return
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	io.WriteString(w, rep.Body)
}

// timeoutKey carries the attempt's timeout to the simulated network.
type timeoutKey struct{}

// network is the simulated network between one client, whose API key is
// key, and the provider. It keeps the status and Retry-After header of
// the last response it delivered, as the client's HTTP stack saw them.
type network struct {
	p          *provider
	key        string
	mu         sync.Mutex
	status     int    // the last response's status; 0 for none (a timeout, a connection error)
	retryAfter string // the last response's Retry-After header
}

// RoundTrip sends req to the local server and moves the clock by the
// answer's latency, or by the timeout when the latency exceeds it.
func (n *network) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(keyHeader, n.key)
	n.delivered(nil)
	start := n.p.clk.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	lat, _ := time.ParseDuration(resp.Header.Get(latencyHeader))
	to, _ := req.Context().Value(timeoutKey{}).(time.Duration)
	if to > 0 && lat > to {
		resp.Body.Close()
		n.p.clk.Advance(to)
		return nil, context.DeadlineExceeded
	}
	n.p.clk.Advance(lat)
	n.delivered(resp)
	return pace(n.p.clk, req.Context(), resp, start, to)
}

// delivered notes resp (nil: none) as the last response.
func (n *network) delivered(resp *http.Response) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.status, n.retryAfter = 0, ""
	if resp != nil {
		n.status, n.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}
}

// last returns the status and Retry-After header of the last response;
// 0 and "" when the last request had none.
func (n *network) last() (status int, retryAfter string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status, n.retryAfter
}

// client is a client of the SDK through a simulated network of its
// own, with API key key.
func (p *provider) client(key string) (Call, *network) {
	n := &network{p: p, key: key}
	return p.sdk.Client(n, p.srv.URL, key), n
}

// count returns the requests for which keep is true.
func (p *provider) count(keep func(request) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.reqs {
		if keep(r) {
			n++
		}
	}
	return n
}

// sent returns how many requests the provider has seen.
func (p *provider) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// ask makes one call on model, under timeout.
func ask(ctx context.Context, c Call, model string, timeout time.Duration) error {
	return c(context.WithValue(ctx, timeoutKey{}, timeout), model)
}

// outcome is one call as a system made it.
type outcome struct {
	at       time.Time
	agent    string
	ok       bool
	requests int
	model    string        // the model of the call's last request
	dur      time.Duration // from the call's start to its answer, on the clock
	short    bool          // it succeeded with a streamed answer short of the whole
	from     int           // the index of its first request among the provider's
}

// system makes a call of agent at the provider; the loop and the baseline
// router are the two.
type system interface {
	call(ctx context.Context, agent string) outcome
}

// drive makes a call of each agent every gap for d, from the provider's
// clock, and returns the outcomes.
func drive(p *provider, sys system, agents []string, gap, d time.Duration) []outcome {
	start := p.clk.Now()
	var out []outcome
	for i := 0; time.Duration(i)*gap < d; i++ {
		at := start.Add(time.Duration(i) * gap)
		if now := p.clk.Now(); now.Before(at) {
			p.clk.Advance(at.Sub(now))
		}
		for _, a := range agents {
			before := p.sent()
			began := p.clk.Now()
			o := sys.call(context.Background(), a)
			o.at, o.agent, o.dur, o.from = at, a, p.clk.Now().Sub(began), before
			p.mu.Lock()
			if o.requests = len(p.reqs) - before; o.requests > 0 {
				o.model = p.reqs[len(p.reqs)-1].model
			}
			p.mu.Unlock()
			out = append(out, o)
		}
	}
	return out
}
