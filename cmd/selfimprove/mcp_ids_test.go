package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// idOf returns the "id" of line, one JSON-RPC message, as its bytes.
func idOf(t *testing.T, line string) string {
	t.Helper()
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not a JSON-RPC object: %q", line)
	}
	return string(m.ID)
}

// TestMCPEchoesARequestIDByteForByte: the answer to a request carries its
// ID exactly as sent. Before, the SDK read a numeric ID as a float64 and
// answered with its integer part: 2^53+1 came back as 2^53,
// 12345678901234567890 as -9223372036854775808, 1.50 as 1; and 1e400 was
// refused as no valid ID.
func TestMCPEchoesARequestIDByteForByte(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ids := []string{
		`9007199254740993`, `-9007199254740993`, `12345678901234567890`, `1e400`, `1.50`, `-0`, `1E2`,
		`9007199254740992`, `7`, `"s"`, `"selfimprove.id/1"`,
	}
	m := startRawMCP(t, dir)
	m.handshake(t, "2025-06-18")
	for _, id := range ids {
		m.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`)
		line := m.recvLine(t, "a ping of ID "+id)
		if got := idOf(t, line); got != id || !strings.Contains(line, `"result"`) {
			t.Errorf("a ping of ID %s: answered %s", id, line)
		}
	}
	// Two IDs the SDK would take for one, in flight at once.
	m.send(t, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`)
	m.send(t, `{"jsonrpc":"2.0","id":1.25,"method":"ping"}`)
	got := map[string]bool{}
	for range 2 {
		got[idOf(t, m.recvLine(t, "two pings of IDs 1.5 and 1.25"))] = true
	}
	if !got["1.5"] || !got["1.25"] {
		t.Errorf("two pings of IDs 1.5 and 1.25: answered IDs %v", got)
	}
	// A response, and a cancellation, naming an ID no request of the
	// server's has (its IDs are small integers) are no reason to end the
	// session.
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1e400,"result":{}}`,
		`{"jsonrpc":"2.0","id":1.5,"result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e400}}`,
	} {
		m.send(t, line)
		m.send(t, `{"jsonrpc":"2.0","id":"after","method":"ping"}`)
		if got := m.recvLine(t, "a ping after "+line); idOf(t, got) != `"after"` {
			t.Errorf("a ping after %s: answered %s", line, got)
		}
	}
	// An invalid request keeps its ID too.
	m.send(t, `{"jsonrpc":"2.0","id":12345678901234567890,"method":7}`)
	if line := m.recvLine(t, "an invalid request"); idOf(t, line) != `12345678901234567890` {
		t.Errorf("an invalid request of ID 12345678901234567890: answered %s", line)
	}
}

// TestMCPEchoesBatchIDsByteForByte: under 2025-03-26, which has batches,
// the answers of a batch carry its IDs as sent.
func TestMCPEchoesBatchIDsByteForByte(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	m := startRawMCP(t, dir)
	m.handshake(t, "2025-03-26")
	m.send(t, `[{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"},{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}]`)
	want := `[{"jsonrpc":"2.0","id":9007199254740993,"result":{}},{"jsonrpc":"2.0","id":9007199254740992,"result":{}},{"jsonrpc":"2.0","id":"b","result":{}}]`
	if got := m.recvLine(t, "a batch"); got != want {
		t.Errorf("a batch of pings: %s, want %s", got, want)
	}
}

// TestMCPCancelsARequestByItsIDAsSent: a notifications/cancelled naming a
// request by an ID the SDK holds as a stand-in reaches the SDK naming the
// stand-in, so that it cancels that request (and not another whose ID
// has the same integer part); the answer carries the ID as sent, and the
// stand-in is forgotten.
func TestMCPCancelsARequestByItsIDAsSent(t *testing.T) {
	var stdout bytes.Buffer
	f := &frameFilter{out: &lineWriter{w: &stdout}, stderr: io.Discard}
	fwd := f.check([]byte(`{"jsonrpc":"2.0","id":1.50,"method":"tools/call","params":{"name":"x"}}`))
	standIn := idOf(t, string(fwd))
	if !strings.HasPrefix(standIn, `"`+standInPrefix) {
		t.Fatalf("a request of ID 1.50 goes to the SDK as %s", fwd)
	}
	cancel := f.check([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.50,"reason":"late"}}`))
	if want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + standIn + `,"reason":"late"}}`; string(cancel) != want {
		t.Errorf("its cancellation goes to the SDK as %s, want %s", cancel, want)
	}
	f.out.Write([]byte(`{"jsonrpc":"2.0","id":` + standIn + `,"error":{"code":-32800,"message":"cancelled"}}` + "\n"))
	if got, want := stdout.String(), `{"jsonrpc":"2.0","id":1.50,"error":{"code":-32800,"message":"cancelled"}}`+"\n"; got != want {
		t.Errorf("the SDK's answer goes out as %s, want %s", got, want)
	}
	if len(f.out.standIns) != 0 {
		t.Errorf("stand-ins left after the answer: %v", f.out.standIns)
	}
}

// FuzzReplaceKey: replaceKey gives a JSON object back, with the new
// value at the key and its other members as they were.
func FuzzReplaceKey(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1.50,"method":"ping"}`)
	f.Add(` { "id" :	"a\"id" , "x":{"id":3}, "id":[1, 2] } `)
	f.Add(`{"a":"id","b":{"id":1}}`)
	f.Fuzz(func(t *testing.T, msg string) {
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(msg), &before) != nil || before == nil {
			return
		}
		out := replaceKey([]byte(msg), "id", json.RawMessage(`"selfimprove.id/7"`))
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("replaceKey(%q) = %q: %v", msg, out, err)
		}
		if _, had := before["id"]; had && string(after["id"]) != `"selfimprove.id/7"` {
			t.Errorf("replaceKey(%q) = %q: id %s", msg, out, after["id"])
		}
		for k, v := range before {
			if k != "id" && !bytes.Equal(after[k], v) {
				t.Errorf("replaceKey(%q) = %q: %s changed", msg, out, k)
			}
		}
	})
}
