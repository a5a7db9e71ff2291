package selfimprove_test

import (
	"fmt"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestRecentEventsSurviveARestart: a new Loop on the same directory starts
// with the events of the last one in Loop.Events.
func TestRecentEventsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *si.Loop {
		l, err := si.New(si.WithDir(dir), si.WithLogger(quiet), si.WithNotifier(nil))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open()
	for i := range 3 {
		if err := l.SetConfig("a", si.Config{Route: fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before := l.Events(si.EventFilter{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open()
	defer l.Close()
	after := l.Events(si.EventFilter{})
	if len(before) != 3 || len(after) != len(before) {
		t.Fatalf("%d events before the restart, %d after; want 3 and 3", len(before), len(after))
	}
	for i := range before {
		if after[i].ID != before[i].ID || after[i].Type != before[i].Type {
			t.Fatalf("event %d: %s %s after the restart, %s %s before", i, after[i].ID, after[i].Type, before[i].ID, before[i].Type)
		}
	}
}

// TestRecentEventsReadsTheTail: over a log larger than the part it reads,
// RecentEvents returns the newest events, in order, and skips the line
// the cut lands in.
func TestRecentEventsReadsTheTail(t *testing.T) {
	st, err := si.OpenFileStore(t.TempDir(), si.FileOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pad := strings.Repeat("x", 1000)
	var batch []si.Event
	for i := range 6000 { // about 6 MB
		batch = append(batch, si.Event{ID: fmt.Sprintf("e%05d", i), Type: si.EventConfigSet, AgentID: "a", Message: pad})
		if len(batch) == 500 {
			if err := st.AppendEvents(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	evs, err := st.RecentEvents(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 10 || evs[0].ID != "e05990" || evs[9].ID != "e05999" {
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		t.Fatalf("recent events %v, want e05990..e05999", ids)
	}
}
