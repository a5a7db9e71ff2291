package oaicompat

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Body is a streamed response body that notes, as it is read, a line
// "data: [DONE]" (or "data:[DONE]"), a chunk that says why a choice
// finished (a finish_reason), and the first error event
// (`data: {"error": ...}`), which some clients skip. Lines are read up
// to MaxErrorBody bytes.
type Body struct {
	io.ReadCloser
	mu       sync.Mutex
	line     []byte
	done     bool
	finished bool   // a chunk carried a finish_reason
	event    []byte // the first error event's data
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
	if !b.finished && bytes.Contains(data, []byte(`"finish_reason"`)) {
		var ch struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &ch) == nil {
			for _, c := range ch.Choices {
				b.finished = b.finished || c.FinishReason != nil && *c.FinishReason != ""
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
// finish_reason (the answer is complete: some servers never send the
// sentinel), and the first error event's data (nil: none).
func (b *Body) Result() (final bool, event []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done || b.finished, b.event
}

// Done reports whether b carried "data: [DONE]" itself.
func (b *Body) Done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// Final reports whether b carried "data: [DONE]" or a finish_reason:
// true for a nil b (no body was watched).
func (b *Body) Final() bool {
	if b == nil {
		return true
	}
	final, _ := b.Result()
	return final
}
