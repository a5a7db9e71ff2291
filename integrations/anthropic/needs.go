package anthropic

import (
	"encoding/json"

	ant "github.com/anthropics/anthropic-sdk-go"

	si "github.com/self-improving-loop/selfimprove"
)

// bytesPerToken is the rule of thumb for English text: about 4 bytes a
// token.
const bytesPerToken = 4

// NeedsOf estimates what params needs of a route, for
// selfimprove.WithNeeds with a ladder that declares its limits
// (selfimprove.Routes.Limits): Tokens is its max_tokens plus its system
// prompt, messages and tools as JSON at about 4 bytes a token (an
// estimate: the provider counts exactly, and has the last word on a
// request near a window); Tools, whether it offers tools; Prefill,
// whether its last message is the assistant's (a prefill to continue).
// Stream is false: set it for a request given to Stream.
func NeedsOf(params ant.MessageNewParams) si.Needs {
	n := si.Needs{Tokens: int(params.MaxTokens), Tools: len(params.Tools) > 0}
	if k := len(params.Messages); k > 0 && params.Messages[k-1].Role == ant.MessageParamRoleAssistant {
		n.Prefill = true
	}
	b, err := json.Marshal(struct {
		S []ant.TextBlockParam `json:"s"`
		M []ant.MessageParam   `json:"m"`
		T []ant.ToolUnionParam `json:"t"`
	}{params.System, params.Messages, params.Tools})
	if err == nil {
		n.Tokens += len(b) / bytesPerToken
	}
	return n
}
