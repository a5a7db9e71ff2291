package oaicompat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// read reads s through a Body, one byte at a time when bytewise.
func read(s string, bytewise bool) *Body {
	var r io.Reader = strings.NewReader(s)
	if bytewise {
		r = iotest.OneByteReader(r)
	}
	b := &Body{ReadCloser: io.NopCloser(r)}
	io.Copy(io.Discard, b)
	return b
}

// chunk is a chunk of a streamed chat completion for its choice i, with
// finish, its finish_reason as JSON.
func chunk(i int, finish string) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":%d,"delta":{"content":"x"},"finish_reason":%s}]}`+"\n\n", i, finish)
}

const errEvent = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`

func TestBody(t *testing.T) {
	cases := []struct {
		name, body string
		final      bool
		event      string
	}{
		{"done", "data: {\"a\":1}\n\ndata: [DONE]\n\n", true, ""},
		{"done without space", "data:[DONE]\n\n", true, ""},
		{"done without newline", "data: [DONE]", true, ""},
		{"done with CRLF", "data: {}\r\n\r\ndata: [DONE]\r\n\r\n", true, ""},
		{"truncated", "data: {\"a\":1}\n\n", false, ""},
		{"done inside a line", "data: {\"t\":\"data: [DONE]\"}\n\n", false, ""},
		{"error event", "data: " + errEvent + "\n\ndata: [DONE]\n\n", true, errEvent},
		{"first error event", "data: " + errEvent + "\n\ndata: {\"error\":{\"message\":\"two\"}}\n\n", false, errEvent},
		{"null error", "data: {\"error\":null}\n\n", false, ""},
		{"error as content", "data: {\"content\":\"\\\"error\\\"\"}\n\n", false, ""},
		{"not data", "event: " + errEvent + "\n\n", false, ""},
		{"finish reason", chunk(0, `null`) + chunk(0, `"stop"`), true, ""},
		{"no finish reason", chunk(0, `null`) + chunk(0, `null`), false, ""},
		// n=2: each choice must finish (before, the first finish_reason
		// made a stream cut in choice 1 complete)
		{"one of two choices finished", chunk(0, `null`) + chunk(1, `null`) + chunk(0, `"stop"`) + chunk(1, `null`), false, ""},
		{"both choices finished", chunk(0, `null`) + chunk(1, `null`) + chunk(0, `"stop"`) + chunk(1, `"length"`), true, ""},
		{"a choice beyond MaxChoices", chunk(0, `"stop"`) + chunk(MaxChoices, `"stop"`), false, ""},
	}
	for _, c := range cases {
		for _, bytewise := range []bool{false, true} {
			final, event := read(c.body, bytewise).Result()
			if final != c.final || string(event) != c.event {
				t.Errorf("%s (bytewise %v): final %v, event %q; want %v, %q", c.name, bytewise, final, event, c.final, c.event)
			}
		}
	}
	if !(*Body)(nil).Final() {
		t.Error("a nil Body is not final")
	}
}

// FuzzBody: a Body reads what it wraps unchanged, and notes the same
// however the reads split it.
func FuzzBody(f *testing.F) {
	f.Add("data: [DONE]\n\n")
	f.Add("data: " + errEvent + "\r\n")
	f.Add("data:\n\ndata: {\"error\":{}}")
	f.Fuzz(func(t *testing.T, s string) {
		whole := &Body{ReadCloser: io.NopCloser(strings.NewReader(s))}
		got, err := io.ReadAll(whole)
		if err != nil || string(got) != s {
			t.Fatalf("read %q, %v; want %q", got, err, s)
		}
		final, event := whole.Result()
		final1, event1 := read(s, true).Result()
		if final != final1 || string(event) != string(event1) {
			t.Fatalf("whole: %v %q; bytewise: %v %q", final, event, final1, event1)
		}
	})
}

// roundTripper answers every request with its response.
type roundTripper func() *http.Response

func (f roundTripper) RoundTrip(*http.Request) (*http.Response, error) { return f(), nil }

func get(t *testing.T, rt http.RoundTripper, c *Capture) *http.Response {
	t.Helper()
	ctx := context.Background()
	if c != nil {
		ctx = c.Context(ctx)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/chat/completions", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestTransportFailure: a failed response's status, code and Retry-After
// make the error Wrap returns, and the caller still reads its body.
func TestTransportFailure(t *testing.T) {
	const body = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	rt := Transport(roundTripper(func() *http.Response {
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"7"}}, Body: io.NopCloser(strings.NewReader(body))}
	}))
	c := &Capture{}
	resp := get(t, rt, c)
	if b, _ := io.ReadAll(resp.Body); string(b) != body {
		t.Fatalf("the caller read %q", b)
	}
	sdkErr := errors.New("sdk: 429")
	var e *failure.APIError
	if err := c.Wrap("p", sdkErr); !errors.As(err, &e) || !errors.Is(err, sdkErr) {
		t.Fatalf("Wrap: %v", err)
	}
	if e.Provider != "p" || e.Status != 429 || e.Code != "rate_limit_exceeded" || e.Wait != 7*time.Second || e.Class != failure.ClassRateLimit {
		t.Fatalf("%+v", e)
	}
	// A new attempt has its own capture: a success leaves the error as it is.
	ok := Transport(roundTripper(func() *http.Response {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("data: [DONE]\n\n"))}
	}))
	c2 := &Capture{}
	get(t, ok, c2)
	if err := c2.Wrap("p", sdkErr); err != sdkErr || c2.Watched() != nil {
		t.Fatalf("Wrap after a 200: %v; watched %v", err, c2.Watched())
	}
	c3 := &Capture{Stream: true}
	io.ReadAll(get(t, ok, c3).Body)
	if !c3.Watched().Final() {
		t.Fatal("a streamed 200 with data: [DONE] is not final")
	}
	get(t, ok, nil) // no capture: passed through
}

func TestEvent(t *testing.T) {
	cause := errors.New("event")
	var e *failure.APIError
	if err := Event("p", cause, []byte(errEvent)); !errors.As(err, &e) || !errors.Is(err, cause) {
		t.Fatalf("Event: %v", err)
	}
	if e.Status != 200 || e.Type != "server_error" || e.Class != failure.ClassOverloaded || e.Message == "" {
		t.Fatalf("%+v", e)
	}
}

// Choices is finished once every choice that came has finished, however
// the finish_reasons come: each alone, repeated, or before another
// choice's first chunk.
func TestChoices(t *testing.T) {
	var c Choices
	if c.Finished() {
		t.Error("no choice came: finished")
	}
	c.Note(0, false)
	c.Note(3, false)
	c.Note(0, true)
	c.Note(0, true)
	if c.Finished() {
		t.Error("choice 3 unfinished: finished")
	}
	c.Note(3, true)
	if !c.Finished() {
		t.Error("choices 0 and 3 finished: not finished")
	}
	c.Note(MaxChoices-1, false)
	if c.Finished() {
		t.Error("choice 127 unfinished: finished")
	}
	c.Note(MaxChoices-1, true)
	c.Note(-1, true)
	if c.Finished() {
		t.Error("a choice whose index is not followed: finished")
	}
}
