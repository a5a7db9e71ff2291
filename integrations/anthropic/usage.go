package anthropic

import (
	"encoding/json"
	"net/http"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/self-improving-loop/selfimprove/internal/usage"
	"github.com/self-improving-loop/selfimprove/price"
)

// WithPrices returns a client option (add it after ClientOptions) that
// reports the token usage of each successful response, priced by prices,
// as the cost of the loop's call whose context made the request
// (selfimprove.AddCost): a message's usage, and a streamed one's from
// its message_start and message_delta events. Input tokens count those
// written to and read from the prompt cache; those read are priced at
// CachedInput. A model missing from prices reports nothing. The cost is
// booked once the client has read the response, before the SDK call
// returns (a stream: once it ends or is closed), so within fn, from the
// program's first call on (see docs/quality.md).
func WithPrices(prices price.Table) option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err == nil && len(prices) > 0 {
			t := &price.Tally{}
			usage.Watch(res, func(data []byte) { note(t, data) }, func() { t.Report(req.Context(), prices) })
		}
		return res, err
	})
}

// UsageOf returns the usage a message counted, as price.Table
// prices it.
func UsageOf(u ant.Usage) price.Usage {
	return price.Usage{Input: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, CachedInput: u.CacheReadInputTokens, Output: u.OutputTokens}
}

// note reads into t one JSON document of the response: a message, or a stream
// event that carries a usage.
func note(t *price.Tally, data []byte) {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &head) != nil {
		return
	}
	switch head.Type {
	case "message":
		var m ant.Message
		if json.Unmarshal(data, &m) == nil {
			t.Set(string(m.Model), UsageOf(m.Usage))
		}
	case "message_start":
		var ev ant.MessageStartEvent
		if json.Unmarshal(data, &ev) == nil {
			t.Set(string(ev.Message.Model), UsageOf(ev.Message.Usage))
		}
	case "message_delta":
		// Its counts are the message's so far: the output's, and the
		// input's when it gives them.
		var ev ant.MessageDeltaEvent
		if json.Unmarshal(data, &ev) == nil {
			d := ev.Usage
			t.Update(func(_ *string, u *price.Usage) bool {
				if in := d.InputTokens + d.CacheCreationInputTokens + d.CacheReadInputTokens; in > 0 {
					u.Input, u.CachedInput = in, d.CacheReadInputTokens
				}
				u.Output = max(u.Output, d.OutputTokens)
				return false // a delta alone, without its message_start, names no model
			})
		}
	}
}
