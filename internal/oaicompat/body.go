package oaicompat

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Body is a streamed response body that notes, as it is read, a line
// "data: [DONE]" (or "data:[DONE]"), the choices its chunks carried and
// which of them said why they finished (a finish_reason; see Choices),
// and the first error event (`data: {"error": ...}`), which some clients
// skip. Lines are read up to MaxErrorBody bytes.
type Body struct {
	io.ReadCloser
	mu      sync.Mutex
	line    []byte
	done    bool
	choices Choices // the choices the chunks carried, finished or not
	event   []byte  // the first error event's data
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range p[:n] {
		switch {
		case c == '\n' || c == '\r':
			b.endLine()
		case len(b.line) < MaxErrorBody:
			b.line = append(b.line, c)
		}
	}
	if err == io.EOF {
		b.endLine() // a last line without its newline
	}
	return n, err
}

// endLine notes the line read, and starts the next.
func (b *Body) endLine() {
	data, ok := bytes.CutPrefix(b.line, []byte("data:"))
	b.line = b.line[:0]
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		b.done = true
		return
	}
	if bytes.Contains(data, []byte(`"choices"`)) {
		var ch struct {
			Choices []struct {
				Index        int64   `json:"index"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &ch) == nil {
			for _, c := range ch.Choices {
				b.choices.Note(c.Index, c.FinishReason != nil && *c.FinishReason != "")
			}
		}
	}
	if b.event != nil || !bytes.Contains(data, []byte(`"error"`)) {
		return
	}
	var ev struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) == nil && len(ev.Error) > 0 && string(ev.Error) != "null" {
		b.event = bytes.Clone(data)
	}
}

// Result returns whether the body carried "data: [DONE]" or a
// finish_reason for every choice it carried (the answer is complete:
// some servers never send the sentinel), and the first error event's
// data (nil: none).
func (b *Body) Result() (final bool, event []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done || b.choices.Finished(), b.event
}

// Done reports whether b carried "data: [DONE]" itself.
func (b *Body) Done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// Final reports whether b carried "data: [DONE]" or a finish_reason for
// every choice: true for a nil b (no body was watched).
func (b *Body) Final() bool {
	if b == nil {
		return true
	}
	final, _ := b.Result()
	return final
}
