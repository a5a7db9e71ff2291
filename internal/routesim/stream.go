package routesim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Stream is what the fault suite needs of an SDK's streaming: its events,
// as the API frames them (the internal/streamtest events), and a client
// that streams.
type Stream struct {
	// Start are the events before the first token; Token is the event
	// that carries text; End are the events after the last token, the
	// final one last ("data: [DONE]", message_stop).
	Start []string
	Token func(text string) string
	End   []string
	// Malformed is an event whose data is not valid JSON.
	Malformed string
	// Client returns a StreamCall through the SDK's streaming client with
	// its own retries off, over rt, at url with API key key: through the
	// adapter's Stream and Transport when adapter is true (the loop's),
	// with the SDK alone otherwise (the baseline router's).
	Client func(rt http.RoundTripper, url, key string, adapter bool) StreamCall
}

// StreamCall streams one answer from model and returns its text and the
// error of the stream (for the adapter's, the error Stream returns). The
// request must carry ctx.
type StreamCall func(ctx context.Context, model string) (string, error)

// streamTokens is how many tokens a whole answer has; tokenGap, the time
// between two of them.
const (
	streamTokens = 40
	tokenGap     = 50 * time.Millisecond
)

// fullText is the text of a whole streamed answer.
var fullText = func() string {
	var b strings.Builder
	for i := range streamTokens {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}()

// How a scripted stream ends.
type streamEnd int

const (
	endFull    streamEnd = iota // every event, the final one last
	endNoFinal                  // every event but the final one, then the server closes
	endCut                      // the tokens sent, then the server closes, without the end events
	endHang                     // the tokens sent, then open and silent
)

// shape is how a scripted stream goes: its first token after first, then
// tokens (all of them when 0) tokenGap apart, a malformed event after
// them when malformed, and its end.
type shape struct {
	first     time.Duration
	tokens    int
	malformed bool
	end       streamEnd
}

// The headers by which the provider tells the simulated network how to
// pace a stream: the wait before each event, and whether the connection
// stays open and silent after the last.
const (
	gapsHeader = "X-Sim-Gaps"
	hangHeader = "X-Sim-Hang"
)

// events returns the SSE events of a stream of shape sh in the SDK's
// framing, and the wait before each.
func (st *Stream) events(sh *shape) (evs []string, gaps []time.Duration) {
	add := func(ev string, gap time.Duration) { evs, gaps = append(evs, ev), append(gaps, gap) }
	for _, ev := range st.Start {
		add(ev, 0)
	}
	n := sh.tokens
	if n == 0 {
		n = streamTokens
	}
	for i := range n {
		gap := tokenGap
		if i == 0 {
			gap = sh.first
		}
		add(st.Token(fmt.Sprintf("w%d ", i)), gap)
	}
	if sh.malformed {
		add(st.Malformed, tokenGap)
		return evs, gaps
	}
	switch sh.end {
	case endFull:
		for _, ev := range st.End {
			add(ev, 0)
		}
	case endNoFinal:
		for _, ev := range st.End[:len(st.End)-1] {
			add(ev, 0)
		}
	}
	return evs, gaps
}

// serveStream writes the stream of shape sh, and the headers that pace it.
func (st *Stream) serveStream(w http.ResponseWriter, sh *shape) {
	evs, gaps := st.events(sh)
	g := make([]string, len(gaps))
	for i, d := range gaps {
		g[i] = d.String()
	}
	w.Header().Set(gapsHeader, strings.Join(g, ","))
	if sh.end == endHang {
		w.Header().Set(hangHeader, "1")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, ev := range evs {
		io.WriteString(w, ev+"\n\n")
	}
}

// readTimeoutKey carries the baseline's stream read timeout (LiteLLM's
// stream_timeout: the longest wait for the next bytes) to the simulated
// network.
type readTimeoutKey struct{}

// errReadTimeout is the baseline client's read timeout.
var errReadTimeout = fmt.Errorf("stream read timeout: %w", context.DeadlineExceeded)

// pacer is a stream's body as the client reads it through the simulated
// network: each event after its wait on the clock, cut when the
// request's context ends (the loop's first-token or idle watch), when the
// attempt's timeout passes, or at the baseline's read timeout.
type pacer struct {
	clk     *fakeclock.Clock
	ctx     context.Context
	body    io.Closer
	events  []string
	gaps    []time.Duration
	hang    bool
	cur     string
	i       int
	start   time.Time     // when the request was sent
	timeout time.Duration // the attempt's (0: none)
	idle    time.Duration // the read timeout (0: none)
}

// pace returns resp with its body paced by the headers the provider set,
// for a request sent at start under ctx; resp itself when it is no
// stream.
func pace(clk *fakeclock.Clock, ctx context.Context, resp *http.Response, start time.Time, timeout time.Duration) (*http.Response, error) {
	gh := resp.Header.Get(gapsHeader)
	if gh == "" {
		return resp, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	p := &pacer{clk: clk, ctx: ctx, body: resp.Body, hang: resp.Header.Get(hangHeader) != "", start: start, timeout: timeout}
	p.idle, _ = ctx.Value(readTimeoutKey{}).(time.Duration)
	for _, ev := range strings.SplitAfter(string(raw), "\n\n") {
		if ev != "" {
			p.events = append(p.events, ev)
		}
	}
	for _, g := range strings.Split(gh, ",") {
		d, err := time.ParseDuration(g)
		if err != nil {
			return nil, err
		}
		p.gaps = append(p.gaps, d)
	}
	if len(p.gaps) != len(p.events) {
		return nil, errors.New("routesim: a paced stream's gaps and events differ in number")
	}
	resp.Body = p
	return resp, nil
}

// Read returns the next event's bytes once their time has come.
func (p *pacer) Read(b []byte) (int, error) {
	if p.cur == "" {
		if p.i == len(p.events) {
			if !p.hang {
				return 0, io.EOF
			}
			if err := p.wait(time.Hour); err != nil {
				return 0, err
			}
			return 0, io.ErrUnexpectedEOF // an hour of silence: the server gave up
		}
		if err := p.wait(p.gaps[p.i]); err != nil {
			return 0, err
		}
		p.cur = p.events[p.i]
		p.i++
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// Close closes the body.
func (p *pacer) Close() error { return p.body.Close() }

// wait moves the clock d on, 100 ms at a time, and returns the first cut
// that comes before: the request's context ended, the attempt's timeout
// passed, or the read timeout.
func (p *pacer) wait(d time.Duration) error {
	for waited := time.Duration(0); ; {
		if err := p.ctx.Err(); err != nil {
			return err
		}
		if waited >= d {
			return nil
		}
		step := min(100*time.Millisecond, d-waited)
		if p.idle > 0 && waited+step > p.idle {
			p.clk.Advance(max(p.idle-waited, 0))
			return errReadTimeout
		}
		if p.timeout > 0 && p.clk.Now().Add(step).Sub(p.start) > p.timeout {
			p.clk.Advance(max(p.start.Add(p.timeout).Sub(p.clk.Now()), 0))
			return context.DeadlineExceeded
		}
		p.clk.Advance(step)
		waited += step
	}
}
