package main

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// The SDK reads a numeric request ID as a float64 and answers with its
// integer part: 2^53+1 comes back as 2^53, 1.50 as 1, and two distinct IDs
// may become one. JSON-RPC wants the ID echoed as sent. So the filter
// gives the SDK a string ID of its own (a stand-in) in place of each ID
// the SDK would not echo byte for byte, and the lineWriter puts the
// client's ID back into the answer.

// standInPrefix begins the stand-in IDs. A client's string ID that begins
// with it gets a stand-in too, so that a stand-in is never a client's ID.
const standInPrefix = "selfimprove.id/"

// maxExact is the largest integer a float64 holds exactly, 2^53.
const maxExact = 1 << 53

// echoedAsSent reports whether the SDK answers id, a valid ID, with the
// same bytes: a string not beginning with standInPrefix, or an integer
// written in its shortest form, of magnitude 2^53 at most.
func echoedAsSent(id json.RawMessage) bool {
	if s, ok := unquote(id); ok {
		return len(s) < len(standInPrefix) || s[:len(standInPrefix)] != standInPrefix
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n >= -maxExact && n <= maxExact && strconv.FormatInt(n, 10) == string(id)
}

// standIn returns the stand-in of id for the SDK, and remembers id to put
// it back into the answer. lw.mu is held.
func (lw *lineWriter) standIn(id json.RawMessage) json.RawMessage {
	if lw.standIns == nil {
		lw.standIns = map[string]json.RawMessage{}
	}
	lw.nextStandIn++
	s := standInPrefix + strconv.FormatUint(lw.nextStandIn, 10)
	lw.standIns[s] = id
	return strconv.AppendQuote(nil, s) // ASCII: the JSON string as it is
}

// toSDK returns msg, one JSON-RPC request of ID id, as the SDK gets it:
// with a stand-in ID where the SDK would not echo id as sent. lw.mu is
// held.
func (lw *lineWriter) toSDK(msg []byte, id json.RawMessage) []byte {
	if id == nil || echoedAsSent(id) {
		return msg
	}
	return replaceKey(msg, "id", lw.standIn(id))
}

// cancelToSDK returns msg, a notifications/cancelled of params params, as
// the SDK gets it: with the stand-in of the ID it cancels, if that has
// one; nil (nothing to cancel) for an ID the SDK would not read as sent
// that no request in flight has. lw.mu is held.
func (lw *lineWriter) cancelToSDK(msg, params []byte) []byte {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil || echoedAsSent(p.RequestID) {
		return msg
	}
	key := idKey(p.RequestID)
	for s, id := range lw.standIns {
		if idKey(id) == key {
			params = replaceKey(params, "requestId", strconv.AppendQuote(nil, s))
			return replaceKey(msg, "params", params)
		}
	}
	return nil
}

// restoreIDs returns p, one message or a batch written by the SDK and
// ending in a newline, with the client's IDs in place of the stand-ins.
// lw.mu is held.
func (lw *lineWriter) restoreIDs(p []byte) []byte {
	if len(lw.standIns) == 0 {
		return p
	}
	body := bytes.TrimRight(p, "\n")
	if len(body) == 0 || body[0] != '[' {
		return append(lw.restoreID(body), '\n')
	}
	var batch []json.RawMessage
	if json.Unmarshal(body, &batch) != nil {
		return p
	}
	out := []byte{'['}
	for i, m := range batch {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, lw.restoreID(m)...)
	}
	return append(out, ']', '\n')
}

// restoreID returns msg, one message, with the client's ID in place of
// its stand-in, which it forgets. lw.mu is held.
func (lw *lineWriter) restoreID(msg []byte) []byte {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(msg, &m)
	s, ok := unquote(m.ID)
	id, stood := lw.standIns[s]
	if !ok || !stood {
		return msg
	}
	delete(lw.standIns, s)
	return replaceKey(msg, "id", id)
}

// replaceKey returns msg, one JSON object, with v as the value of each of
// its keys named name, its other bytes as they are; msg itself when it is
// not a JSON object.
func replaceKey(msg []byte, name string, v json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(msg))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return msg
	}
	var out []byte
	done := 0 // msg[:done] is in out
	for dec.More() {
		key, err := dec.Token()
		afterKey := int(dec.InputOffset())
		var skip json.RawMessage
		if err != nil || dec.Decode(&skip) != nil {
			return msg
		}
		if key != name {
			continue
		}
		end := int(dec.InputOffset())
		start := afterKey + bytes.IndexByte(msg[afterKey:], ':') + 1
		for start < end && isBlank(msg[start]) {
			start++
		}
		out = append(append(out, msg[done:start]...), v...)
		done = end
	}
	return append(out, msg[done:]...)
}

// isBlank reports whether b is JSON's whitespace.
func isBlank(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r'
}

// batchToSDK returns batch, a batch of requests, as the SDK gets it: with
// stand-in IDs where the SDK would not echo an ID as sent. lw.mu is held.
func (lw *lineWriter) batchToSDK(batch []json.RawMessage) []byte {
	out := []byte{'['}
	for i, m := range batch {
		var w wireMessage
		json.Unmarshal(m, &w)
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, lw.toSDK(m, w.ID)...)
	}
	return append(out, ']')
}
