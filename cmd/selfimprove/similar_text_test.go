package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/admin"
)

// longFailure is a failure's message followed by a stack trace: over the
// admin API's 4,096 bytes.
var longFailure = "upstream 503: service unavailable\n" + strings.Repeat("\tat com.example.Client.call(Client.java:42)\n", 120)

// TestMCPSimilarTakesALongTextAndNamesText: similar_failures, and the
// prompt before_retrying, look a failure over 4 KiB up by its first 4,096
// bytes, and a blank text is a tool error that names `text`, the tool's
// argument. Before, the first was refused with "q is over 4096 bytes" and
// the second with "q is required…": both named `q`, a parameter the tool
// does not have.
func TestMCPSimilarTakesALongTextAndNamesText(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	m := startRawMCP(t, dir)
	m.handshake(t, "2025-06-18")
	args, _ := json.Marshal(map[string]any{"text": longFailure})
	m.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"similar_failures","arguments":`+string(args)+`}}`)
	r := m.recv(t, "similar_failures of a long text")
	res, _ := r["result"].(map[string]any)
	b, _ := json.Marshal(res["structuredContent"])
	var list admin.SimilarList
	if res == nil || res["isError"] == true || json.Unmarshal(b, &list) != nil || len(list.Memories) == 0 {
		t.Errorf("similar_failures of a long text: %v, want the failures like it", r)
	}

	m.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"similar_failures","arguments":{"text":"   "}}}`)
	r = m.recv(t, "similar_failures of a blank text")
	res, _ = r["result"].(map[string]any)
	if res == nil || res["isError"] != true {
		t.Fatalf("similar_failures of a blank text: %v, want a tool error", r)
	}
	if msg := res["content"].([]any)[0].(map[string]any)["text"].(string); !strings.HasPrefix(msg, "text ") {
		t.Errorf("similar_failures of a blank text: %q, want an error naming `text`", msg)
	}

	args, _ = json.Marshal(map[string]any{"name": "before_retrying", "arguments": map[string]string{"failure": longFailure}})
	m.send(t, `{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":`+string(args)+`}`)
	if r := m.recv(t, "before_retrying a long failure"); r["result"] == nil {
		t.Errorf("before_retrying a long failure: %v", r)
	}
}

// TestSimilarCLITakesALongText: selfimprove similar looks a long TEXT up
// by its first 4,096 bytes (before: "q is over 4096 bytes"), and refuses a
// blank one naming TEXT (before: "q is required…").
func TestSimilarCLITakesALongText(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	var list admin.SimilarList
	ok(t, nil, &list, "similar", longFailure, "--dir", dir, "--json")
	if len(list.Memories) == 0 {
		t.Errorf("similar of a long text: no failures like it")
	}
	fails(t, nil, 2, "TEXT is blank", "similar", "   ", "--dir", dir)
}

// TestSimilarTextCutsAtACharacter: the text is cut to its first 4,096
// bytes at a character's start, without its surrounding blanks.
func TestSimilarTextCutsAtACharacter(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int // bytes
	}{
		{"  short\n", 5},
		{strings.Repeat("a", 4096), 4096},
		{strings.Repeat("a", 4095) + "é", 4095}, // é's 2 bytes straddle the bound
		{strings.Repeat("€", 2000), 4095},       // 3 bytes each
		{" \t\n", 0},
	} {
		got := similarText(c.in)
		if len(got) != c.want || !utf8.ValidString(got) || !strings.HasPrefix(strings.TrimSpace(c.in), got) {
			t.Errorf("similarText(%.10q…) is %d bytes (valid UTF-8 %v), want %d", c.in, len(got), utf8.ValidString(got), c.want)
		}
	}
}
