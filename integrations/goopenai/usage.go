package goopenai

import (
	"encoding/json"
	"net/http"

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
		t := &price.Tally{}
		usage.Watch(res, func(data []byte) { note(t, data) }, func() { t.Report(req.Context(), p.prices) })
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

// note reads into t a chat completion, or a chunk of one, that carries a usage.
func note(t *price.Tally, data []byte) {
	var c struct {
		Model string      `json:"model"`
		Usage *goai.Usage `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil || c.Usage == nil {
		return
	}
	t.Set(c.Model, UsageOf(*c.Usage))
}
