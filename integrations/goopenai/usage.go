package goopenai

import (
	"net/http"

	goai "github.com/sashabaranov/go-openai"
	"github.com/self-improving-loop/selfimprove/price"
)

// PricedTransport returns price.Transport(base, prices): a RoundTripper
// over base (nil: http.DefaultTransport) that reports the token usage of
// each successful chat completion, priced by prices, as the cost of the
// loop's call whose context made the request (selfimprove.AddCost): a
// completion's usage, and a streamed one's from its last chunk (set
// StreamOptions.IncludeUsage, or the API sends none). Give it to
// ClientConfig as its base: ClientConfig(token, PricedTransport(prices,
// nil)). A model missing from prices reports nothing. The cost is booked
// once the client has read the response (a stream: once it ends or is
// closed), so within fn, from the program's first call on (see
// docs/quality.md).
func PricedTransport(prices price.Table, base http.RoundTripper) http.RoundTripper {
	return price.Transport(base, prices)
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
