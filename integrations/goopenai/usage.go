package goopenai

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	goai "github.com/sashabaranov/go-openai"
	"github.com/self-improving-loop/selfimprove/internal/usage"
	"github.com/self-improving-loop/selfimprove/price"
)

// PricedTransport returns a RoundTripper over base (nil:
// http.DefaultTransport) that reports the token usage of each successful
// chat completion, priced by prices, as the cost of the loop's call
// whose context made the request (selfimprove.AddCost): a completion's
// usage, and a streamed one's from its last chunk (set
// StreamOptions.IncludeUsage, or the API sends none). Give it to
// ClientConfig as its base: ClientConfig(token, PricedTransport(prices,
// nil)). A model missing from prices reports nothing. The cost is booked
// once the client has read the response (a stream: once it ends or is
// closed), so within fn. See docs/quality.md for the one call a program
// makes at start-up so that costs are booked.
func PricedTransport(prices price.Table, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return priced{prices, base}
}

type priced struct {
	prices price.Table
	base   http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (p priced) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := p.base.RoundTrip(req)
	if err == nil && len(p.prices) > 0 {
		t := &tally{}
		usage.Watch(res, t.note, func() { t.report(req.Context(), p.prices) })
	}
	return res, err
}

// UsageOf returns the usage a chat completion counted, as
// price.Table prices it.
func UsageOf(u goai.Usage) price.Usage {
	s := price.Usage{Input: int64(u.PromptTokens), Output: int64(u.CompletionTokens)}
	if u.PromptTokensDetails != nil {
		s.CachedInput = int64(u.PromptTokensDetails.CachedTokens)
	}
	return s
}

// tally is the usage one response reported.
type tally struct {
	mu    sync.Mutex
	model string
	u     price.Usage
	seen  bool
}

// note reads a chat completion, or a chunk of one, that carries a usage.
func (t *tally) note(data []byte) {
	var c struct {
		Model string      `json:"model"`
		Usage *goai.Usage `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil || c.Usage == nil {
		return
	}
	t.mu.Lock()
	t.model, t.u, t.seen = c.Model, UsageOf(*c.Usage), true
	t.mu.Unlock()
}

// report books the usage noted, if any.
func (t *tally) report(ctx context.Context, prices price.Table) {
	t.mu.Lock()
	model, u, seen := t.model, t.u, t.seen
	t.mu.Unlock()
	if seen {
		prices.Add(ctx, model, u)
	}
}
