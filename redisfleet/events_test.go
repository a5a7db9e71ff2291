package redisfleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
)

// TestEventsExactAgentIDOnTheWire checks the entries of the event stream:
// an event of a UTF-8 agent ID is stored as it always was (no
// agent_id_b64), one of an ID that is not UTF-8 carries the exact ID in
// agent_id_b64, as the event log does; entries stored before are read
// as they were, and a planted agent_id_b64 that is not the ID agent_id
// shows, or an entry holding a newline, is left out.
func TestEventsExactAgentIDOnTheWire(t *testing.T) {
	s := startRedis(t)
	c := client(t, s)
	f := newFleet(t, c, "ev:")
	ctx := context.Background()
	add := func(v string) {
		t.Helper()
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "ev:events", Values: []any{"e", v}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	add(`{"id":"old","type":"config_set","agent_id":"support-bot","message":"m"}`)
	add(`{"id":"forged","type":"config_set","agent_id":"other","agent_id_b64":"/w==","message":"m"}`)
	add("{\"id\":\"split\",\"agent_id\":\"a\"}\n{\"id\":\"smuggled\",\"agent_id\":\"b\"}")
	if err := f.AppendEvents(ctx, []si.Event{{ID: "utf8", AgentID: "café"}, {ID: "raw", AgentID: "caf\xe9"}}); err != nil {
		t.Fatal(err)
	}
	entries, err := c.XRange(ctx, "ev:events", "-", "+").Result()
	if err != nil || len(entries) != 5 {
		t.Fatalf("XRANGE: %d entries, %v", len(entries), err)
	}
	if e := entries[3].Values["e"].(string); strings.Contains(e, "agent_id_b64") {
		t.Errorf("the entry of a UTF-8 agent ID carries agent_id_b64: %s", e)
	}
	if e := entries[4].Values["e"].(string); !strings.HasSuffix(e, `"agent_id_b64":"Y2Fm6Q=="}`) {
		t.Errorf("the entry of agent %q lacks its exact ID: %s", "caf\xe9", e)
	}
	got, err := f.Events(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.ID+"="+e.AgentID)
	}
	if want := "old=support-bot utf8=café raw=caf\xe9"; strings.Join(ids, " ") != want {
		t.Fatalf("Events: %q, want %q", strings.Join(ids, " "), want)
	}
}
