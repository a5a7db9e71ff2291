package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP SDK's stdio transport ends the session, and with it selfimprove
// mcp, at the first line it cannot take: a line that is not JSON, a JSON
// value that is not a JSON-RPC message, a batch under a protocol version
// that has none (modelcontextprotocol/go-sdk issue #1209). JSON-RPC 2.0
// wants such a line answered with an error, and the session to go on. So
// stdin goes through a frameFilter first: it answers the lines the SDK
// would choke on itself and passes the others on unchanged.

// JSON-RPC 2.0's codes of a line that is not JSON, and of a JSON value
// that is not a valid message.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
)

// maxFrame bounds a line of stdin, as the SDK bounds its frames.
const maxFrame = mcp.DefaultMaxLineLength

// maxDepth is the nesting of objects and arrays the SDK decodes at most.
const maxDepth = 1000

// batchesFrom is the first protocol version without JSON-RPC batches.
const batchesFrom = "2025-06-18"

// frameFilter passes the lines of stdin that are JSON-RPC messages the SDK
// takes on to it, and answers the others on out.
type frameFilter struct {
	out    *lineWriter
	stderr io.Writer
}

// lineWriter serialises whole lines onto stdout: the SDK's messages (one
// Write each) and the filter's answers. It also learns, from the SDK's
// answer to initialize, the protocol version of the session, and which
// requests of a batch are still unanswered.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	closed  bool            // the session ended: write nothing more
	initID  string          // the key of the initialize request's ID
	version string          // the negotiated protocol version; "" before
	pending map[string]bool // IDs of batched requests not yet answered

	standIns    map[string]json.RawMessage // the client's IDs, by their stand-in
	nextStandIn uint64                     // the number of the last stand-in
}

// Write writes p, one whole message, unless the session ended.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return len(p), nil
	}
	out := lw.restoreIDs(p)
	lw.learn(out)
	if _, err := lw.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the writes: stdout itself stays open.
func (lw *lineWriter) Close() error {
	lw.mu.Lock()
	lw.closed = true
	lw.mu.Unlock()
	return nil
}

// learn reads the protocol version off the answer to initialize, and
// forgets the IDs of a batch once its answer goes out. lw.mu is held.
func (lw *lineWriter) learn(p []byte) {
	switch {
	case len(lw.pending) > 0 && len(p) > 0 && p[0] == '[':
		var batch []struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(p, &batch)
		for _, m := range batch {
			delete(lw.pending, idKey(m.ID))
		}
	case lw.version == "" && lw.initID != "":
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(p, &m) == nil && idKey(m.ID) == lw.initID {
			lw.version = m.Result.ProtocolVersion
		}
	}
}

// answer writes a JSON-RPC error of code and msg for the message of ID id
// (null when nil).
func (lw *lineWriter) answer(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	lw.Write(append(b, '\n'))
}

// run reads in line by line, until its end or the SDK stops reading, and
// passes the good lines to to, whole lines ending in a newline.
func (f *frameFilter) run(in io.Reader, to *io.PipeWriter) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, over, err := readFrame(r, maxFrame)
		switch {
		case over:
			f.out.answer(nil, rpcInvalidRequest, fmt.Sprintf("Invalid Request: a message over %d bytes", maxFrame))
		case len(line) > 0:
			if fwd := f.check(line); fwd != nil {
				if _, werr := to.Write(append(fwd, '\n')); werr != nil {
					return // the session ended
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			to.CloseWithError(err)
			return
		}
	}
}

// readFrame reads a line from r without its end and surrounding blanks;
// over reports a line longer than limit, whose bytes it skips.
func readFrame(r *bufio.Reader, limit int) (line []byte, over bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > limit+2 { // room for "\r\n"
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimSpace(line), over, err
		}
	}
}

// check returns line, as the SDK gets it, when the SDK takes it; otherwise
// it answers it, or drops it (a malformed response), and returns nil.
func (f *frameFilter) check(line []byte) []byte {
	if !json.Valid(line) {
		f.out.answer(nil, rpcParseError, "Parse error: the line is not one JSON value")
		return nil
	}
	if tooDeep(line) {
		f.out.answer(nil, rpcInvalidRequest, fmt.Sprintf("Invalid Request: nested deeper than %d", maxDepth))
		return nil
	}
	switch line[0] {
	case '{':
		return f.checkMessage(line)
	case '[':
		return f.checkBatch(line)
	}
	f.out.answer(nil, rpcInvalidRequest, "Invalid Request: a message is a JSON object")
	return nil
}

// wireMessage is a JSON-RPC message as the filter checks it.
type wireMessage struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// checkMessage returns line, one JSON object, as the SDK gets it when it
// is a message the SDK takes; it answers, or drops, the others.
func (f *frameFilter) checkMessage(line []byte) []byte {
	var m wireMessage
	json.Unmarshal(line, &m)
	id, problem := messageProblem(&m)
	switch {
	case problem == "" && m.Method != nil:
		f.out.mu.Lock()
		defer f.out.mu.Unlock()
		switch method, _ := unquote(m.Method); {
		case method == "initialize" && id != nil:
			f.out.initID = idKey(id)
		case method == "notifications/cancelled" && id == nil:
			return f.out.cancelToSDK(line, m.Params)
		}
		return f.out.toSDK(line, id)
	case problem == "" && !echoedAsSent(id):
		// A response to none of the server's requests (their IDs are
		// small integers), which the SDK could take for another one's,
		// or fail to read and end the session.
		fmt.Fprintln(f.stderr, "selfimprove mcp: dropped a response whose id is no request's of the server")
	case problem == "":
		return line
	case m.Method == nil && (m.Result != nil || m.Error != nil):
		// A malformed response: answering it could start an endless
		// exchange of errors with the client.
		fmt.Fprintf(f.stderr, "selfimprove mcp: dropped a malformed response: %s\n", problem)
	default:
		f.out.answer(id, rpcInvalidRequest, "Invalid Request: "+problem)
	}
	return nil
}

// messageProblem says what is wrong with m, "" if nothing, and returns its
// ID when it is a valid one (nil otherwise).
func messageProblem(m *wireMessage) (json.RawMessage, string) {
	var id json.RawMessage
	idOK := m.ID == nil || validID(m.ID)
	if m.ID != nil && idOK {
		id = m.ID
	}
	var wireErr struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	tag, _ := unquote(m.JSONRPC)
	_, methodOK := unquote(m.Method)
	switch {
	case tag != "2.0":
		return id, `"jsonrpc" must be "2.0"`
	case !idOK:
		return id, `"id" must be a string or a number`
	case m.Method != nil:
		if !methodOK {
			return id, `"method" must be a string`
		}
	case m.Result == nil && m.Error == nil:
		return id, `a message has a "method", or a "result" or an "error"`
	case m.ID == nil:
		return id, `a response has an "id"`
	case m.Error != nil && string(m.Error) != "null" && json.Unmarshal(m.Error, &wireErr) != nil:
		return id, `"error" must be an object with a "code" (an integer) and a "message"`
	}
	return id, ""
}

// unquote decodes raw, a JSON string; ok is false for anything else.
func unquote(raw json.RawMessage) (s string, ok bool) {
	return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
}

// validID reports whether id, valid JSON, is a string or a number.
func validID(id json.RawMessage) bool {
	return idKey(id) != ""
}

// idKey is the identity of a valid ID, "" for an invalid one: a string,
// or a number as written. (A number the SDK would not echo as sent goes
// to it as a stand-in of its own, so two such IDs never clash there.)
func idKey(id json.RawMessage) string {
	if s, ok := unquote(id); ok {
		return "s" + s
	}
	if len(id) > 0 && (id[0] == '-' || id[0] >= '0' && id[0] <= '9') {
		return "n" + string(id)
	}
	return ""
}

// checkBatch returns line, one JSON array, as the SDK gets it when it is a
// batch the SDK answers; it answers the others with one error. The
// protocol versions from 2025-06-18 have no batches; under the earlier
// ones the SDK answers a batch of requests, but never one with a
// notification (it hangs), and ends the session at an ID that a batch
// repeats, or that a batch still unanswered holds: such a batch is
// refused whole.
func (f *frameFilter) checkBatch(line []byte) []byte {
	var batch []json.RawMessage
	json.Unmarshal(line, &batch)
	f.out.mu.Lock()
	version := f.out.version
	f.out.mu.Unlock()
	ids, problem := batchProblem(batch, version)
	f.out.mu.Lock()
	for id := range ids {
		if problem == "" && f.out.pending[id] {
			problem = "a request of an earlier batch, still unanswered, has the same ID"
		}
	}
	var fwd []byte
	if problem == "" {
		if f.out.pending == nil {
			f.out.pending = map[string]bool{}
		}
		for id := range ids {
			f.out.pending[id] = true
		}
		fwd = f.out.batchToSDK(batch)
	}
	f.out.mu.Unlock()
	if problem != "" {
		f.out.answer(nil, rpcInvalidRequest, "Invalid Request: "+problem)
	}
	return fwd
}

// batchProblem says what makes batch one the SDK would not answer under
// protocol version, "" if nothing, and returns the keys of its IDs.
func batchProblem(batch []json.RawMessage, version string) (map[string]bool, string) {
	switch {
	case len(batch) == 0:
		return nil, "an empty batch"
	case version == "" || version >= batchesFrom:
		return nil, "batches are not supported (protocol " + batchesFrom + " and later have none)"
	}
	ids := map[string]bool{}
	for _, raw := range batch {
		var m wireMessage
		json.Unmarshal(raw, &m)
		_, p := messageProblem(&m)
		switch {
		case raw[0] != '{' || p != "":
			return nil, "a batch holds valid messages only"
		case m.Method == nil || m.ID == nil:
			return nil, "a batch holds requests only: send notifications and responses on their own"
		case ids[idKey(m.ID)]:
			return nil, "a batch's requests have distinct IDs"
		}
		ids[idKey(m.ID)] = true
	}
	return ids, ""
}

// tooDeep reports whether data nests objects and arrays deeper than
// maxDepth, counted as the SDK counts them.
func tooDeep(data []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case inString:
			inString = b != '"'
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			if depth > maxDepth {
				return true
			}
		case b == '}' || b == ']':
			depth = max(depth-1, 0)
		}
	}
	return false
}
