package openai

import (
	"encoding/json"
	"net/http"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/self-improving-loop/selfimprove/internal/usage"
	"github.com/self-improving-loop/selfimprove/price"
)

// WithPrices returns a client option (add it after ClientOptions) that
// reports the token usage of each successful response, priced by prices,
// as the cost of the loop's call whose context made the request
// (selfimprove.AddCost): a chat completion's usage, a streamed one's
// from its last chunk (set params.StreamOptions.IncludeUsage, or the API
// sends none), a Responses API response's, streamed or not. A model
// missing from prices reports nothing. The cost is booked once the
// client has read the response, before the SDK call returns (a stream:
// once it ends or is closed), so within fn. See docs/quality.md for the
// one call a program makes at start-up so that costs are booked.
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

// UsageOf returns the usage a chat completion counted, as
// price.Table prices it.
func UsageOf(u oai.CompletionUsage) price.Usage {
	return price.Usage{Input: u.PromptTokens, CachedInput: u.PromptTokensDetails.CachedTokens, Output: u.CompletionTokens}
}

// ResponseUsageOf returns the usage a Responses API response counted.
func ResponseUsageOf(u responses.ResponseUsage) price.Usage {
	return price.Usage{Input: u.InputTokens, CachedInput: u.InputTokensDetails.CachedTokens, Output: u.OutputTokens}
}

// note reads into t one JSON document of the response: a chat completion or a
// chunk of one, a response or a stream event that carries one.
func note(t *price.Tally, data []byte) {
	var head struct {
		Object string          `json:"object"`
		Type   string          `json:"type"`
		Resp   json.RawMessage `json:"response"`
	}
	if json.Unmarshal(data, &head) != nil {
		return
	}
	var (
		model string
		u     price.Usage
	)
	switch {
	case head.Object == "chat.completion":
		var c oai.ChatCompletion
		if json.Unmarshal(data, &c) != nil || c.JSON.Usage.Raw() == "" || c.JSON.Usage.Raw() == "null" {
			return
		}
		model, u = c.Model, UsageOf(c.Usage)
	case head.Object == "chat.completion.chunk":
		var c oai.ChatCompletionChunk
		if json.Unmarshal(data, &c) != nil || c.JSON.Usage.Raw() == "" || c.JSON.Usage.Raw() == "null" {
			return
		}
		model, u = c.Model, UsageOf(c.Usage)
	case head.Object == "response" || head.Type == "response.completed" || head.Type == "response.incomplete":
		raw := data
		if head.Object != "response" {
			raw = head.Resp
		}
		var r responses.Response
		if json.Unmarshal(raw, &r) != nil || r.JSON.Usage.Raw() == "" || r.JSON.Usage.Raw() == "null" {
			return
		}
		model, u = string(r.Model), ResponseUsageOf(r.Usage)
	default:
		return
	}
	t.Set(model, u) // the last report is the whole response's
}
