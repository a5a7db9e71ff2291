package price

import (
	"encoding/json"
	"net/http"

	"github.com/self-improving-loop/selfimprove/internal/usage"
)

// Transport returns an http.RoundTripper that sends each request through
// base (nil: http.DefaultTransport) and books the token usage of each
// successful (2xx) answer of an OpenAI-compatible API, priced by t, as
// the cost of the loop's call whose context made the request
// (Tally.Report, selfimprove.AddCost). It reads, from a JSON body or the
// data lines of an event stream:
//
//   - a chat completion's usage (object "chat.completion", or a document
//     with neither "object" nor "type", as some compatible servers send
//     it): prompt_tokens, of which prompt_tokens_details.cached_tokens
//     were read from the prompt cache, and completion_tokens;
//   - a streamed chat completion's usage chunk (object
//     "chat.completion.chunk" with a usage that is not null), which the
//     API sends only when the request asks for it
//     (stream_options.include_usage);
//   - a Responses API response (object "response"), or the one the
//     events response.completed and response.incomplete carry:
//     input_tokens, of which input_tokens_details.cached_tokens were
//     cached, and output_tokens.
//
// The price is that of the model the document names (Table.Lookup); a
// model missing from t, an answer with no usage, a failed answer (not
// 2xx), a body that is neither JSON nor an event stream, and a JSON body
// over 8 MiB book nothing. When an answer reports its usage more than
// once, the last report is booked. The cost is booked once the client
// has read the body to its end or, for an event stream, closed it
// (the usage of the events read so far); a JSON body closed before its
// end books nothing. SDKs read the body before their call returns, so
// the cost is booked within fn. The response itself is passed on
// unchanged.
//
// Give it as the base transport of the HTTP client the program builds
// for its SDK or framework: integrations/eino's and langchaingo's
// HTTPClient(Transport(nil, t)), integrations/genkit's
// ClientOptions(Transport(nil, t)), goopenai's ClientConfig. Every
// call a Loop tracks has a place for its cost, from the first on: the
// program needs no start-up call. With an empty t, it only forwards
// requests.
func Transport(base http.RoundTripper, t Table) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, prices: t}
}

type transport struct {
	base   http.RoundTripper
	prices Table
}

// RoundTrip implements http.RoundTripper.
func (p *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := p.base.RoundTrip(req)
	if err == nil && len(p.prices) > 0 {
		t := &Tally{}
		usage.Watch(res, t.noteOpenAI, func() { t.Report(req.Context(), p.prices) })
	}
	return res, err
}

// openAIDoc is the head of a document of an OpenAI-compatible API: a
// chat completion or a chunk of one, a response, or a stream event
// that carries one.
type openAIDoc struct {
	Object   string          `json:"object"`
	Type     string          `json:"type"`
	Model    string          `json:"model"`
	Usage    json.RawMessage `json:"usage"`
	Response *struct {
		Model string          `json:"model"`
		Usage json.RawMessage `json:"usage"`
	} `json:"response"`
}

// chatUsage is a chat completion's usage.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// responseUsage is a Responses API response's usage.
type responseUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// noteOpenAI records in t the usage data reports, if it is a document
// of an OpenAI-compatible API that carries one (see Transport).
func (t *Tally) noteOpenAI(data []byte) {
	var d openAIDoc
	if json.Unmarshal(data, &d) != nil {
		return
	}
	switch {
	case d.Object == "chat.completion" || d.Object == "chat.completion.chunk" || d.Object == "" && d.Type == "":
		var u chatUsage
		if !isNull(d.Usage) && json.Unmarshal(d.Usage, &u) == nil {
			t.Set(d.Model, Usage{Input: u.PromptTokens, CachedInput: u.PromptTokensDetails.CachedTokens, Output: u.CompletionTokens})
		}
	case d.Object == "response" || (d.Type == "response.completed" || d.Type == "response.incomplete") && d.Response != nil:
		model, raw := d.Model, d.Usage
		if d.Object != "response" {
			model, raw = d.Response.Model, d.Response.Usage
		}
		var u responseUsage
		if !isNull(raw) && json.Unmarshal(raw, &u) == nil {
			t.Set(model, Usage{Input: u.InputTokens, CachedInput: u.InputTokensDetails.CachedTokens, Output: u.OutputTokens})
		}
	}
}

// isNull reports whether raw is absent or null.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
