package selfimprove

// This file is the agent ID in the lines of the logs (events.jsonl,
// traces.jsonl). JSON carries only UTF-8, so the readable agent_id of an
// agent whose ID is not UTF-8 has U+FFFD for its other bytes; such a line
// also carries the exact ID, agent_id_b64, as the state file does. A line
// of a UTF-8 ID has no agent_id_b64: it is as it always was.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"
)

// eventLine is a line of the event log: the event and, when its agent ID
// is not UTF-8, the exact ID.
type eventLine struct {
	Event
	AgentIDB64 string `json:"agent_id_b64,omitempty"`
}

// traceLine is a line of the trace log, as eventLine is of the event log.
// traceEncoder writes it.
type traceLine struct {
	Trace
	AgentIDB64 string `json:"agent_id_b64,omitempty"`
}

// logIDB64 is the agent_id_b64 of a log line of agent id: its bytes in
// standard base64 (as the state file's agent_id_b64) when id is not
// UTF-8, "" (none) otherwise.
func logIDB64(id string) string {
	if utf8.ValidString(id) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(id))
}

// logAgentID returns the agent ID of a log line whose agent_id is readable
// and agent_id_b64 is b64: readable when b64 is "" (a UTF-8 ID, or a line
// written before lines had agent_id_b64), else the ID b64 decodes to. It
// refuses a b64 that does not decode, an ID the loop refuses
// (checkAgentID), and one that readable does not show.
func logAgentID(readable, b64 string) (string, error) {
	if b64 == "" {
		return readable, nil
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("agent_id_b64: %w", err)
	}
	id := string(raw)
	if err := checkAgentID(id); err != nil {
		return "", fmt.Errorf("agent_id_b64: %w", err)
	}
	if readableID(id) != readable {
		return "", errors.New("agent_id_b64 is not the ID agent_id shows")
	}
	return id, nil
}

// readableID is id as JSON carries it: each byte that is not part of a
// UTF-8 character becomes U+FFFD, as encoding/json and appendJSONString
// write it.
func readableID(id string) string {
	if utf8.ValidString(id) {
		return id
	}
	b := make([]byte, 0, len(id)+8)
	for i := 0; i < len(id); {
		r, size := utf8.DecodeRuneInString(id[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, id[i:i+size]...)
		}
		i += size
	}
	return string(b)
}
