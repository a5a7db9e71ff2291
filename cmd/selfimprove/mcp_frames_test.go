package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawMCP is `selfimprove mcp` driven over raw JSON-RPC lines, as any MCP
// client (not only the Go SDK's) would.
type rawMCP struct {
	stdin  io.WriteCloser
	lines  chan string // stdout, one line each
	exited chan error
}

func startRawMCP(t *testing.T, dir string) *rawMCP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, bin, "mcp", "--dir", dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &rawMCP{stdin: stdin, lines: make(chan string, 100), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			m.lines <- sc.Text()
		}
		close(m.lines)
		m.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { stdin.Close(); cancel() })
	return m
}

func (m *rawMCP) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(m.stdin, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// recvLine waits at most 10 s for the next line of stdout.
func (m *rawMCP) recvLine(t *testing.T, what string) string {
	t.Helper()
	select {
	case line, open := <-m.lines:
		if !open {
			t.Fatalf("%s: selfimprove mcp ended (%v) instead of answering", what, <-m.exited)
		}
		return line
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10 s", what)
	}
	return ""
}

// recv waits for the next line of stdout, one JSON-RPC object.
func (m *rawMCP) recv(t *testing.T, what string) map[string]any {
	t.Helper()
	line := m.recvLine(t, what)
	var v map[string]any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%s: stdout carries a line that is not a JSON-RPC object: %q", what, line)
	}
	return v
}

// handshake initializes the session with protocol version ver.
func (m *rawMCP) handshake(t *testing.T, ver string) {
	t.Helper()
	m.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+ver+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	r := m.recv(t, "initialize")
	if res, _ := r["result"].(map[string]any); res == nil || res["protocolVersion"] != ver {
		t.Fatalf("initialize: %v", r)
	}
	m.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// badLine is a line of stdin selfimprove mcp answers with an error of
// code, for the ID id.
type badLine struct {
	line string
	code float64
	id   any
}

// TestMCPAnswersABadLineAndGoesOn: a line that is no JSON-RPC message the
// SDK takes is answered with a JSON-RPC error (-32700 for a line that is
// not JSON, -32600 for an invalid request; its ID when it has a valid one,
// null otherwise), and the session goes on: the next ping is answered.
// Before, the SDK ended the session at the first such line (go-sdk issue
// #1209): selfimprove mcp exited with code 1 and answered nothing.
func TestMCPAnswersABadLineAndGoesOn(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ping := `{"jsonrpc":"2.0","id":21,"method":"ping"}`
	for _, session := range []struct {
		version string
		bad     []badLine
	}{
		{"2025-06-18", []badLine{
			{`{not json`, -32700, nil},
			{`{"jsonrpc":"2.0","id":9,"method":"ping"} {}`, -32700, nil},
			{`"hello"`, -32600, nil},
			{`42`, -32600, nil},
			{`[]`, -32600, nil},
			{`{"jsonrpc":"1.0","id":5,"method":"ping"}`, -32600, 5.0},
			{`{"id":6,"method":"ping"}`, -32600, 6.0},
			{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, nil},
			{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, nil},
			{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, -32600, nil},
			{`{"jsonrpc":"2.0","id":"m","method":7}`, -32600, "m"},
			{`{"jsonrpc":"2.0","id":8}`, -32600, 8.0},
			{strings.Repeat("[", 1001) + strings.Repeat("]", 1001), -32600, nil},
			{"[" + ping + "]", -32600, nil}, // no batches from 2025-06-18
		}},
		{"2025-03-26", []badLine{
			{"[" + ping + "," + ping + "]", -32600, nil}, // an ID twice
			{"[" + ping + `,{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`, -32600, nil},
			{`[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`, -32600, nil},
			{"[" + ping + `,{"jsonrpc":"1.0","id":22,"method":"ping"}]`, -32600, nil},
		}},
	} {
		m := startRawMCP(t, dir)
		m.handshake(t, session.version)
		for i, bad := range session.bad {
			id := 100 + i
			m.send(t, bad.line)
			m.send(t, `{"jsonrpc":"2.0","id":`+strconv.Itoa(id)+`,"method":"ping"}`)
			var gotErr, gotPing bool
			for range 2 {
				r := m.recv(t, session.version+": after "+bad.line)
				if e, _ := r["error"].(map[string]any); e != nil {
					gotErr = true
					if e["code"] != bad.code || r["id"] != bad.id || !strings.Contains(e["message"].(string), " ") {
						t.Errorf("%s: %.60s answered %v, want code %v, id %v", session.version, bad.line, r, bad.code, bad.id)
					}
				} else if r["id"] == float64(id) && r["result"] != nil {
					gotPing = true
				}
			}
			if !gotErr || !gotPing {
				t.Errorf("%s: after %.60s: an error %v, the next ping answered %v", session.version, bad.line, gotErr, gotPing)
			}
		}
	}
}

// TestMCPBatchesUnderProtocol20250326: under 2025-03-26, which has
// batches, a batch of requests goes to the SDK as before and is answered
// with one array; a batch the SDK would never answer (one with a
// notification: before, the client waited for ever) is refused with one
// error instead.
func TestMCPBatchesUnderProtocol20250326(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	m := startRawMCP(t, dir)
	m.handshake(t, "2025-03-26")
	m.send(t, `[{"jsonrpc":"2.0","id":21,"method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}]`)
	if got, want := m.recvLine(t, "a batch of two pings"), `[{"jsonrpc":"2.0","id":21,"result":{}},{"jsonrpc":"2.0","id":"b","result":{}}]`; got != want {
		t.Errorf("a batch of two pings: %s, want %s", got, want)
	}
	m.send(t, `[{"jsonrpc":"2.0","id":23,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`)
	if r := m.recv(t, "a batch of a ping and a notification"); r["error"] == nil || r["id"] != nil {
		t.Errorf("a batch of a ping and a notification: %v", r)
	}
	// The IDs of an answered batch may be used again.
	m.send(t, `[{"jsonrpc":"2.0","id":21,"method":"ping"}]`)
	if got := m.recvLine(t, "a batch again"); got != `[{"jsonrpc":"2.0","id":21,"result":{}}]` {
		t.Errorf("a batch with an ID used before: %s", got)
	}
}

// TestMCPDropsAMalformedResponse: a malformed response from the client
// (here an error about a line of ours, with the ID null, as JSON-RPC has
// it) is dropped, not answered (that could start an endless exchange of
// errors), and the session goes on; before, it ended the session.
func TestMCPDropsAMalformedResponse(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	m := startRawMCP(t, dir)
	m.handshake(t, "2025-06-18")
	m.send(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`)
	m.send(t, `{"jsonrpc":"2.0","id":3,"error":"not an object"}`)
	m.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if r := m.recv(t, "a ping after two malformed responses"); r["id"] != 4.0 || r["result"] == nil {
		t.Errorf("after two malformed responses: %v, want the ping's answer", r)
	}
}

// TestReadFrameBoundsALine: a line over the bound is reported and skipped
// whole, and the next line is read as it is, without its blanks.
func TestReadFrameBoundsALine(t *testing.T) {
	r := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\n  {\"a\":1}\r\n{}"), 16)
	for _, want := range []struct {
		line string
		over bool
		eof  bool
	}{{"", true, false}, {`{"a":1}`, false, false}, {"{}", false, true}} {
		line, over, err := readFrame(r, 20)
		if string(line) != want.line || over != want.over || (err == io.EOF) != want.eof {
			t.Errorf("readFrame = %q, %v, %v; want %q, %v, EOF %v", line, over, err, want.line, want.over, want.eof)
		}
	}
}
