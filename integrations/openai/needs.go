package openai

import (
	"encoding/json"

	oai "github.com/openai/openai-go/v3"

	si "github.com/self-improving-loop/selfimprove"
)

// bytesPerToken is OpenAI's rule of thumb for English text: about 4 bytes
// a token.
const bytesPerToken = 4

// NeedsOf estimates what params needs of a route, for
// selfimprove.WithNeeds with a ladder that declares its limits
// (selfimprove.Routes.Limits): Tokens is its max_completion_tokens (else
// max_tokens) plus its messages and tools as JSON at about 4 bytes a
// token (an estimate: the provider counts exactly, and has the last word
// on a request near a window); Tools, whether it offers tools or
// functions; Prefill, whether its last message is the assistant's. Stream
// is false: set it for a request given to Stream.
func NeedsOf(params oai.ChatCompletionNewParams) si.Needs {
	n := si.Needs{Tokens: int(params.MaxCompletionTokens.Or(params.MaxTokens.Or(0))),
		Tools: len(params.Tools) > 0 || len(params.Functions) > 0}
	if k := len(params.Messages); k > 0 && params.Messages[k-1].OfAssistant != nil {
		n.Prefill = true
	}
	b, err := json.Marshal(struct {
		M []oai.ChatCompletionMessageParamUnion `json:"m"`
		T []oai.ChatCompletionToolUnionParam    `json:"t"`
	}{params.Messages, params.Tools})
	if err == nil {
		n.Tokens += len(b) / bytesPerToken
	}
	return n
}
