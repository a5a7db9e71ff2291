package selfimprove_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// Two agents whose IDs are not UTF-8 and read the same once made readable
// ("bot-\uFFFD\uFFFD").
const (
	notUTF8A = "bot-\xff\xfe"
	notUTF8B = "bot-\xfe\xff"
)

// TestEventsOfAnAgentWhoseIDIsNotUTF8SurviveARestart: the recent events
// reach back past a restart with their exact agent IDs. Before, the event
// log kept only the readable agent_id, so after a restart an event of an
// agent whose ID is not UTF-8 named "bot-\uFFFD\uFFFD", an agent that does
// not exist, and two such agents' events could not be told apart. Now its
// line carries the exact ID too (agent_id_b64), and a line of a UTF-8 ID
// is as before, without it.
func TestEventsOfAnAgentWhoseIDIsNotUTF8SurviveARestart(t *testing.T) {
	e := newEnv(t)
	for id, route := range map[string]string{notUTF8A: "r", notUTF8B: "q", "a": "s"} {
		if err := e.l.SetConfig(id, si.Config{Route: route}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	for id, route := range map[string]string{notUTF8A: "r", notUTF8B: "q", "a": "s"} {
		evs := e.l.Events(si.EventFilter{AgentIDs: []string{id}})
		if len(evs) != 1 || evs[0].Change == nil || evs[0].Change.To.Route != route {
			var all []string
			for _, ev := range e.l.Events(si.EventFilter{}) {
				all = append(all, ev.AgentID)
			}
			t.Errorf("after the restart, events of %q: %+v; want its config_set to %q (the events' agents: %q)", id, evs, route, all)
		}
	}
	data, err := os.ReadFile(filepath.Join(e.dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	checkLogLines(t, "events.jsonl", data)
}

// TestTracesOfAnAgentWhoseIDIsNotUTF8AreExact: traces.jsonl, like the
// event log, carries the exact ID of an agent whose ID is not UTF-8, and
// ReadTraces returns it. Before, ReadTraces returned "bot-\uFFFD\uFFFD" for
// both agents.
func TestTracesOfAnAgentWhoseIDIsNotUTF8AreExact(t *testing.T) {
	e := newEnv(t, si.WithTraces(si.TracesSync))
	ids := []string{notUTF8A, notUTF8B, "a"}
	for _, id := range ids {
		e.call(id, nil, 0)
	}
	traces, skipped := readTraces(t, e.dir)
	if len(traces) != len(ids) || skipped != 0 {
		t.Fatalf("%d traces, %d lines skipped; want %d and 0", len(traces), skipped, len(ids))
	}
	for i, tr := range traces {
		if tr.AgentID != ids[i] {
			t.Errorf("trace %d: agent %q, want %q", i, tr.AgentID, ids[i])
		}
	}
	data, err := os.ReadFile(filepath.Join(e.dir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	checkLogLines(t, "traces.jsonl", data)
}

// checkLogLines checks that the lines of agent "a" in a log have no
// agent_id_b64, and those of notUTF8A and notUTF8B have theirs.
func checkLogLines(t *testing.T, name string, data []byte) {
	t.Helper()
	var utf8Lines, otherLines int
	for line := range bytes.Lines(data) {
		s := string(line)
		switch {
		case strings.Contains(s, `"agent_id":"a"`):
			utf8Lines++
			if strings.Contains(s, "agent_id_b64") {
				t.Errorf("%s: a line of a UTF-8 ID has agent_id_b64: %s", name, s)
			}
		case strings.Contains(s, `"agent_id":"bot-\ufffd\ufffd"`):
			otherLines++
			a, b := b64Field(notUTF8A), b64Field(notUTF8B)
			if strings.Contains(s, a) == strings.Contains(s, b) {
				t.Errorf("%s: a line of an ID that is not UTF-8 has neither or both of %s and %s: %s", name, a, b, s)
			}
		}
	}
	if utf8Lines == 0 || otherLines != 2 {
		t.Errorf("%s: %d lines of agent \"a\", %d of \"bot-\\ufffd\\ufffd\"; want some and 2:\n%s", name, utf8Lines, otherLines, data)
	}
}

// b64Field is the agent_id_b64 field of a log line of agent id.
func b64Field(id string) string {
	return `"agent_id_b64":"` + base64.StdEncoding.EncodeToString([]byte(id)) + `"`
}

// TestLogLinesWithABadAgentIDB64AreSkipped: ReadEvents and ReadTraces take
// a line's agent ID from agent_id_b64 only when it decodes to an ID the
// loop accepts that agent_id shows; they skip the line otherwise. A line
// without agent_id_b64 (an older one) keeps its readable agent_id.
func TestLogLinesWithABadAgentIDB64AreSkipped(t *testing.T) {
	long := "\xff" + strings.Repeat("x", si.MaxAgentIDLen)
	for _, c := range []struct {
		name, fields string
		want         string // the agent read; "" skipped
	}{
		{"exact", `"agent_id":"bot-\ufffd\ufffd",` + b64Field(notUTF8A), notUTF8A},
		{"the other exact", `"agent_id":"bot-\ufffd\ufffd",` + b64Field(notUTF8B), notUTF8B},
		{"no agent_id_b64", `"agent_id":"bot-\ufffd\ufffd"`, "bot-\ufffd\ufffd"},
		{"UTF-8 in agent_id_b64", `"agent_id":"a",` + b64Field("a"), "a"},
		{"not base64", `"agent_id":"bot-\ufffd\ufffd","agent_id_b64":"!!"`, ""},
		{"not a string", `"agent_id":"bot-\ufffd\ufffd","agent_id_b64":7`, ""},
		{"another agent_id", `"agent_id":"bot-\ufffd",` + b64Field(notUTF8A), ""},
		{"a UTF-8 ID that agent_id does not show", `"agent_id":"a",` + b64Field("b"), ""},
		{"over MaxAgentIDLen", `"agent_id":"\ufffd` + strings.Repeat("x", si.MaxAgentIDLen) + `",` + b64Field(long), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			skipped, err := si.ReadEvents(strings.NewReader(`{"id":"1","type":"config_set",`+c.fields+`,"message":"m"}`+"\n"),
				func(e si.Event) error { got = append(got, e.AgentID); return nil })
			if err != nil {
				t.Fatal(err)
			}
			skippedT, err := si.ReadTraces(strings.NewReader(`{"version":1,`+c.fields+`,"outcome":"success"}`+"\n"),
				func(tr si.Trace) error { got = append(got, tr.AgentID); return nil })
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == "" && (len(got) != 0 || skipped != 1 || skippedT != 1):
				t.Errorf("read agents %q, skipped %d and %d lines; want the lines skipped", got, skipped, skippedT)
			case c.want != "" && (len(got) != 2 || got[0] != c.want || got[1] != c.want || skipped+skippedT != 0):
				t.Errorf("read agents %q, skipped %d and %d lines; want %q twice", got, skipped, skippedT, c.want)
			}
		})
	}
}
