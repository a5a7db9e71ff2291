package oaifake

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/price"
)

// OpenAI's answers that count their tokens (the API reference's
// examples), as UsageServer sends them.
const (
	usageChat  = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`
	usageHead  = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_44709d6fcb","choices":[`
	usageChunk = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`
)

// usageEvents is the stream UsageServer sends, before its usage chunk.
var usageEvents = []string{
	usageHead + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
	usageHead + `{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`,
	usageHead + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
}

// UsagePrices prices the model of UsageServer's answers
// ("gpt-4o-2024-08-06", as "gpt-4o"), in dollars per million tokens.
var UsagePrices = price.Table{"gpt-4o": {Input: 2.5, Output: 10, CachedInput: 1.25}}

// What UsageServer's answers cost at UsagePrices: a chat completion of
// 1,117 input tokens (1,024 cached) and 46 output tokens; a stream of 9
// and 12.
const (
	ChatCost   = (93*2.5 + 1024*1.25 + 46*10) / 1e6
	StreamCost = (9*2.5 + 12*10) / 1e6
)

// UsageServer is a fake OpenAI API whose answers count their tokens.
type UsageServer struct {
	*httptest.Server
	mu    sync.Mutex
	asked []bool
}

// NewUsageServer starts a UsageServer, closed at the end of t: it
// answers a chat completion request with a completion and its usage,
// and a streamed one ("stream": true) with its chunks, then, when the
// request asks for it (stream_options.include_usage), the usage chunk,
// then "data: [DONE]".
func NewUsageServer(t testing.TB) *UsageServer {
	s := &UsageServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		json.Unmarshal(body, &req)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, usageChat)
			return
		}
		s.mu.Lock()
		s.asked = append(s.asked, req.StreamOptions.IncludeUsage)
		s.mu.Unlock()
		events := usageEvents
		if req.StreamOptions.IncludeUsage {
			events = append(events[:len(events):len(events)], usageChunk)
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, join(append(events[:len(events):len(events)], "data: [DONE]")))
	}))
	t.Cleanup(s.Close)
	return s
}

// AskedUsage reports, for each streamed request so far, whether it
// asked for the usage chunk.
func (s *UsageServer) AskedUsage() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.asked...)
}

// CheckCosts fails t unless l's agent "generate" booked one call at
// ChatCost and its agent "stream" one at StreamCost.
func CheckCosts(t testing.TB, l *si.Loop) {
	t.Helper()
	for id, want := range map[string]float64{"generate": ChatCost, "stream": StreamCost} {
		if st := l.Stats(id); st.Costed != 1 || math.Abs(st.CostPerSuccess-want) > 1e-15 {
			t.Errorf("%s: costed %d at %g per success; want 1 at %g", id, st.Costed, st.CostPerSuccess, want)
		}
	}
}
