package selfimprove_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

func TestEventsRingAndSubscribe(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithRecentEvents(4))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	slow := l.Subscribe("", 1)
	fast := l.Subscribe("", 100)
	for i := range 6 {
		if err := l.MarkCritical(fmt.Sprintf("a%d", i%2), i%3 == 0); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	evs := l.Events(si.EventFilter{})
	if len(evs) != 4 || evs[0].AgentID != "a0" || evs[3].AgentID != "a1" {
		t.Fatalf("ring: %+v", evs)
	}
	for i := range 6 {
		e, ok := <-fast.C
		if !ok || e.AgentID != fmt.Sprintf("a%d", i%2) || e.Type != si.EventCriticalSet {
			t.Fatalf("fast %d: %+v %v", i, e, ok)
		}
	}
	if _, ok := <-slow.C; !ok {
		t.Fatal("slow lost its first event")
	}
	if _, ok := <-slow.C; ok || !errors.Is(slow.Err(), si.ErrSubscriberBehind) {
		t.Fatalf("slow not dropped: %v", slow.Err())
	}

	// Resume after an event in the ring, and after one that left it.
	r := l.Subscribe(evs[1].ID, 0)
	if len(r.Backlog) != 2 || r.Backlog[0].ID != evs[2].ID {
		t.Errorf("backlog: %+v", r.Backlog)
	}
	r.Close()
	if _, ok := <-r.C; ok || r.Err() != nil {
		t.Errorf("closed subscription: %v", r.Err())
	}
	if r := l.Subscribe("00000000-0000-7000-8000-000000000000", 0); len(r.Backlog) != 4 {
		t.Errorf("backlog after an old ID: %d", len(r.Backlog))
	}

	// Filters and pages.
	if got := l.Events(si.EventFilter{AgentIDs: []string{"a1"}}); len(got) != 2 {
		t.Errorf("by agent: %d", len(got))
	}
	if got := l.Events(si.EventFilter{Types: []si.EventType{si.EventConfigSet}}); len(got) != 0 {
		t.Errorf("by type: %d", len(got))
	}
	if got := l.Events(si.EventFilter{Since: evs[2].Time}); len(got) != 2 {
		t.Errorf("since: %d", len(got))
	}
	if got := l.Events(si.EventFilter{Until: evs[2].Time}); len(got) != 2 {
		t.Errorf("until: %d", len(got))
	}
	if got := l.Events(si.EventFilter{Limit: 1, Before: evs[3].ID}); len(got) != 1 || got[0].ID != evs[2].ID {
		t.Errorf("before: %+v", got)
	}
	if got := l.Events(si.EventFilter{Limit: 1, After: evs[0].ID}); len(got) != 1 || got[0].ID != evs[1].ID {
		t.Errorf("after: %+v", got)
	}

	l.Close()
	if _, ok := <-fast.C; ok || !errors.Is(fast.Err(), si.ErrClosed) {
		t.Errorf("after Close: %v", fast.Err())
	}
	if s := l.Subscribe("", 1); !errors.Is(s.Err(), si.ErrClosed) {
		t.Errorf("Subscribe after Close: %v", s.Err())
	}
}

func TestRecentEventsOption(t *testing.T) {
	for _, n := range []int{0, -1, 1<<20 + 1} {
		if _, err := si.New(si.WithStore(si.NewRAMStore()), si.WithRecentEvents(n)); !errors.Is(err, si.ErrInvalidOption) {
			t.Errorf("WithRecentEvents(%d): %v", n, err)
		}
	}
}

func TestViews(t *testing.T) {
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithClock(clk), si.WithNotifier(nil), si.WithStrategy(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, d := range []time.Duration{time.Millisecond, 7 * time.Millisecond, 2 * time.Second, 2 * time.Minute} {
		l.ExecuteWithImprovement(t.Context(), "m", func(context.Context, si.Config) error {
			clk.Advance(d)
			if i == 1 {
				return errBoom
			}
			return nil
		})
	}
	var got []si.AgentView
	for m := range l.Views() {
		got = append(got, m)
	}
	b := si.LatencyBuckets()
	if len(got) != 1 || len(b) != 13 {
		t.Fatalf("%+v %v", got, b)
	}
	m := got[0]
	h := m.Latency
	want := make([]uint64, len(b)+1)
	want[0], want[1], want[8], want[13] = 1, 1, 1, 1
	if m.AgentID != "m" || m.Successes != 3 || m.Failures != 1 || m.Config.Version != 1 || m.Circuit != si.CircuitClosed ||
		h.Count != 4 || h.Sum != 2*time.Minute+2*time.Second+8*time.Millisecond || fmt.Sprint(h.Counts) != fmt.Sprint(want) {
		t.Errorf("%+v", m)
	}
	// View reads the same counters, with the state under the lock.
	v, ok := l.View("m")
	if !ok || !v.Loaded || v.Successes != 3 || v.Failures != 1 || fmt.Sprint(v.Latency.Counts) != fmt.Sprint(want) ||
		v.Stats.Calls != 4 || v.Stats.Failures != 1 || v.Circuit != si.CircuitClosed {
		t.Errorf("View = %+v, %v", v, ok)
	}
}

// TestSummaryWire: a daily summary event keeps its JSON: each agent is a
// line of its day's figures, read back into the views and written again
// byte for byte.
func TestSummaryWire(t *testing.T) {
	const wire = `{"id":"x","time":"2000-01-01T09:00:00Z","type":"daily_summary","agent_id":"","message":"daily summary of 2 agents",` +
		`"summary":{"time":"2000-01-01T09:00:00Z","agents":[` +
		`{"agent_id":"chat","calls":1,"success_rate":1,"health":1,"applied":0,"confirmed":0,"rolled_back":0},` +
		`{"agent_id":"search","calls":14,"success_rate":0.8571428571428571,"health":0.9,"applied":1,"confirmed":1,"rolled_back":0}]}}`
	var e si.Event
	if err := json.Unmarshal([]byte(wire), &e); err != nil {
		t.Fatal(err)
	}
	if s := e.Summary; s == nil || len(s.Agents) != 2 || s.Agents[1].AgentID != "search" || s.Agents[1].Stats.CallsPerDay != 14 ||
		s.Agents[1].Stats.SuccessRate != 12.0/14 || s.Agents[1].Health != 0.9 || s.Agents[1].Applied != 1 || s.Agents[1].Confirmed != 1 {
		t.Fatalf("read %+v", e.Summary)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != wire {
		t.Fatalf("written\n%s\nwant\n%s", b, wire)
	}
	// An empty summary keeps its null list.
	if b, _ := json.Marshal(si.Summary{}); string(b) != `{"time":"0001-01-01T00:00:00Z","agents":null}` {
		t.Errorf("empty summary: %s", b)
	}
}
