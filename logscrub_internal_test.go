package selfimprove

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/slogtest"
)

// TestScrubHandlerIsAHandler: the loop's scrubbing handler keeps slog's
// rules for handlers (testing/slogtest), over a JSON handler.
func TestScrubHandlerIsAHandler(t *testing.T) {
	var buf bytes.Buffer
	h := scrubHandler{slog.NewJSONHandler(&buf, nil)}
	results := func() []map[string]any {
		var ms []map[string]any
		for _, line := range bytes.Split(buf.Bytes(), []byte{'\n'}) {
			if len(line) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		return ms
	}
	if err := slogtest.TestHandler(h, results); err != nil {
		t.Error(err)
	}
}

// TestScrubHandlerScrubsValues: an error value, a string under "error",
// and both inside groups and WithAttrs, are scrubbed; other values and
// the words around them are kept.
func TestScrubHandlerScrubsValues(t *testing.T) {
	var buf bytes.Buffer
	l := scrubbing(slog.New(slog.NewTextHandler(&buf, nil)))
	if scrubbing(l) != l {
		t.Error("a scrubbing logger wrapped twice")
	}
	secret := errors.New("POST https://api.example.com/v1?api_key=sk-abcdefghijklmnopqrstuvwx failed: Authorization: Bearer abcdefghijklmnopQRST12345678")
	l.With("error", "token=hunter2hunter2hunter2").WithGroup("g").Error("store failed", "err", secret, slog.Group("inner", "error", secret.Error()), "note", "api_key is fine to name")
	s := buf.String()
	for _, leak := range []string{"sk-abcdefghijklmnopqrstuvwx", "abcdefghijklmnopQRST12345678", "hunter2hunter2hunter2"} {
		if strings.Contains(s, leak) {
			t.Errorf("the log holds %q: %s", leak, s)
		}
	}
	if !strings.Contains(s, "store failed") || !strings.Contains(s, "api_key is fine to name") || !strings.Contains(s, "POST https://api.example.com") {
		t.Errorf("the log lost more than the secrets: %s", s)
	}
}
