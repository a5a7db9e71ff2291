package price

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/internal/usage"
)

// Bodies as the OpenAI API sends them (the API reference's examples).
const (
	chatBody   = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`
	chunkHead  = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb",`
	usageChunk = chunkHead + `"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`
	chatEvents = chunkHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

` + chunkHead + `"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

` + chunkHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

`
	chatStream   = chatEvents + usageChunk + "\n\ndata: [DONE]\n\n"
	response     = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}`
	respPending  = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"in_progress","error":null,"model":"gpt-4.1-2025-04-14","output":[],"usage":null}`
	respInStream = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-4.1-2025-04-14","output":[],"usage":{"input_tokens":200,"input_tokens_details":{"cached_tokens":100},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":216}}`
	respStream   = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":" + respPending + "}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"usage\"}\n\n" +
		"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":2,\"response\":" + respInStream + "}\n\n"
)

// prices in dollars per million tokens.
var prices = Table{
	"gpt-4o":      {Input: 2.5, Output: 10, CachedInput: 1.25},
	"gpt-4o-mini": {Input: 0.15, Output: 0.6},
	"gpt-4.1":     {Input: 2, Output: 8, CachedInput: 0.5},
}

// served answers each request with status, content type and body.
func served(t *testing.T, status int, ctype, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// bookedVia makes one call of a fresh Loop that sends a request to url
// through Transport(nil, p) and reads its body with read; it returns
// the calls costed and their cost.
func bookedVia(t *testing.T, url string, p Table, read func(io.ReadCloser)) (int, float64) {
	t.Helper()
	client := &http.Client{Transport: Transport(nil, p)}
	l, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithStrategy(nil), selfimprove.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.ExecuteWithImprovement(context.Background(), "a", func(ctx context.Context, _ selfimprove.Config) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		read(res.Body)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := l.Stats("a")
	return st.Costed, st.Cost
}

// readAll reads a body to its end, then closes it.
func readAll(b io.ReadCloser) { io.Copy(io.Discard, b); b.Close() }

// TestTransportBooksTokenCosts: through Transport, a chat completion, a
// stream with its usage chunk, a Responses API response and a stream of
// one ended by response.incomplete each book their tokens' price, by the
// model the body names (dated: its undated name's), cached input at its
// price; the event-stream's type may carry parameters.
func TestTransportBooksTokenCosts(t *testing.T) {
	for _, tt := range []struct {
		name, ctype, body string
		want              float64
	}{
		{"chat", "application/json", chatBody, (93*2.5 + 1024*1.25 + 46*10) / 1e6},
		{"stream", "text/event-stream; charset=utf-8", chatStream, (9*0.15 + 12*0.6) / 1e6},
		{"responses", "application/json", response, (36*2 + 87*8) / 1e6},
		{"responses stream", "text/event-stream", respStream, (100*2 + 100*0.5 + 16*8) / 1e6},
	} {
		n, c := bookedVia(t, served(t, 200, tt.ctype, tt.body), prices, readAll)
		if n != 1 || math.Abs(c-tt.want) > 1e-15 {
			t.Errorf("%s: costed %d at %g; want 1 at %g", tt.name, n, c, tt.want)
		}
	}
}

// TestTransportBooksNothing: an unknown model, a failed answer, a stream
// without a usage chunk, a JSON body closed before its end, one over
// usage.MaxJSON, and an empty table book no cost; a stream closed before
// its end books the usage it carried so far.
func TestTransportBooksNothing(t *testing.T) {
	big := chatBody[:len(chatBody)-1] + `,"pad":"` + strings.Repeat("x", usage.MaxJSON) + `"}`
	closeEarly := func(b io.ReadCloser) { b.Read(make([]byte, 16)); b.Close() }
	for _, tt := range []struct {
		name   string
		url    string
		p      Table
		read   func(io.ReadCloser)
		costed int
	}{
		{"unknown model", served(t, 200, "application/json", chatBody), Table{"gpt-4o-mini": {Input: 1}}, readAll, 0},
		{"status 500", served(t, 500, "application/json", chatBody), prices, readAll, 0},
		{"no usage chunk", served(t, 200, "text/event-stream", chatEvents+"data: [DONE]\n\n"), prices, readAll, 0},
		{"JSON closed early", served(t, 200, "application/json", chatBody), prices, closeEarly, 0},
		{"over MaxJSON", served(t, 200, "application/json", big), prices, readAll, 0},
		{"empty table", served(t, 200, "application/json", chatBody), nil, readAll, 0},
		{"text/plain", served(t, 200, "text/plain", chatBody), prices, readAll, 0},
		{"stream closed after usage", served(t, 200, "text/event-stream", usageChunk+"\n\n"+strings.Repeat(chunkHead+`"choices":[]}`+"\n\n", 500)), prices,
			func(b io.ReadCloser) { io.ReadFull(b, make([]byte, len(usageChunk)+2)); b.Close() }, 1},
	} {
		if n, c := bookedVia(t, tt.url, tt.p, tt.read); n != tt.costed {
			t.Errorf("%s: costed %d at %g; want %d", tt.name, n, c, tt.costed)
		}
	}
}

// TestTransportFirstCallCosted: in a fresh process, with no start-up
// call, the first call made through a Transport books its cost (run in
// a child process, so that nothing an earlier test did counts).
func TestTransportFirstCallCosted(t *testing.T) {
	if looptest.FreshProcess(t) {
		return
	}
	if n, _ := bookedVia(t, served(t, 200, "application/json", chatBody), prices, readAll); n != 1 {
		t.Fatalf("first call through Transport costed %d, want 1", n)
	}
}

// TestNoteOpenAI: the documents a usage is read from, and those it is not.
func TestNoteOpenAI(t *testing.T) {
	for _, tt := range []struct {
		doc   string
		model string
		u     Usage
		seen  bool
	}{
		{chatBody, "gpt-4o-2024-08-06", Usage{Input: 1117, CachedInput: 1024, Output: 46}, true},
		{strings.TrimPrefix(usageChunk, "data: "), "gpt-4o-mini-2024-07-18", Usage{Input: 9, Output: 12}, true},
		{response, "gpt-4.1-2025-04-14", Usage{Input: 36, Output: 87}, true},
		{`{"model":"llama3","usage":{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":null}}`, "llama3", Usage{Input: 5, Output: 7}, true},
		{`{"type":"response.completed","response":` + respInStream + `}`, "gpt-4.1-2025-04-14", Usage{Input: 200, CachedInput: 100, Output: 16}, true},
		{`{"type":"response.created","response":` + respPending + `}`, "", Usage{}, false},
		{`{"type":"response.completed","response":` + respPending + `}`, "", Usage{}, false},
		{`{"type":"response.failed","response":` + respInStream + `}`, "", Usage{}, false},
		{`{"type":"message","model":"claude","usage":{"input_tokens":1,"output_tokens":1}}`, "", Usage{}, false},
		{`{"object":"chat.completion.chunk","model":"m","usage":null}`, "", Usage{}, false},
		{`{"object":"chat.completion","model":"m","usage":{"prompt_tokens":"9"}}`, "", Usage{}, false},
		{`{"object":"embedding","model":"m","usage":{"prompt_tokens":9}}`, "", Usage{}, false},
		{`[DONE]`, "", Usage{}, false},
	} {
		var tl Tally
		tl.noteOpenAI([]byte(tt.doc))
		if tl.model != tt.model || tl.u != tt.u || tl.seen != tt.seen {
			t.Errorf("%.60s: %q %+v %v; want %q %+v %v", tt.doc, tl.model, tl.u, tl.seen, tt.model, tt.u, tt.seen)
		}
	}
}

// FuzzNoteOpenAI: any document, seeded with the API's bodies, parses
// without panicking, and a usage read from it prices to a finite cost
// that is not negative.
func FuzzNoteOpenAI(f *testing.F) {
	for _, s := range []string{chatBody, strings.TrimPrefix(usageChunk, "data: "), response, respPending, respInStream,
		`{"type":"response.completed","response":` + respInStream + `}`, `{"model":"m","usage":{"prompt_tokens":-5,"completion_tokens":9223372036854775807}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var tl Tally
		tl.noteOpenAI(data)
		if !tl.seen {
			return
		}
		c, ok := Table{tl.model: {Input: 1, Output: 2, CachedInput: 0.5}}.Cost(tl.model, tl.u)
		if !ok || c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			t.Fatalf("%q: usage %+v of %q costs %v, %v", data, tl.u, tl.model, c, ok)
		}
	})
}
