package openai

import (
	"net/http"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/self-improving-loop/selfimprove/price"
)

// WithPrices returns a client option (add it after ClientOptions) that
// reports the token usage of each successful response, priced by prices,
// as the cost of the loop's call whose context made the request
// (selfimprove.AddCost): a chat completion's usage, a streamed one's
// from its last chunk (set params.StreamOptions.IncludeUsage, or the API
// sends none), a Responses API response's, streamed or not. It reads
// them as price.Transport does. A model missing from prices reports
// nothing. The cost is booked once the client has read the response,
// before the SDK call returns (a stream: once it ends or is closed), so
// within fn, from the program's first call on (see docs/quality.md).
func WithPrices(prices price.Table) option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return price.Transport(roundTrip(next), prices).RoundTrip(req)
	})
}

// roundTrip is a middleware's next as an http.RoundTripper, for
// price.Transport.
type roundTrip option.MiddlewareNext

// RoundTrip implements http.RoundTripper.
func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// UsageOf returns the usage a chat completion counted, as
// price.Table prices it.
func UsageOf(u oai.CompletionUsage) price.Usage {
	return price.Usage{Input: u.PromptTokens, CachedInput: u.PromptTokensDetails.CachedTokens, Output: u.CompletionTokens}
}

// ResponseUsageOf returns the usage a Responses API response counted.
func ResponseUsageOf(u responses.ResponseUsage) price.Usage {
	return price.Usage{Input: u.InputTokens, CachedInput: u.InputTokensDetails.CachedTokens, Output: u.OutputTokens}
}
