package selfimprove_test

import (
	"context"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// Record of a call that ran under an earlier version books its cost for
// that version and for the route that version ran on. Before, the route
// was "" (the ladder's primary), whatever the version's.
func TestRecordEarlierVersionBooksItsRoute(t *testing.T) {
	e := newEnv(t)
	e.call("a", nil, time.Millisecond) // v1
	if err := e.l.SetConfig("a", si.Config{Route: "backup"}); err != nil {
		t.Fatal(err)
	}
	v2 := e.l.Config("a").Version
	if err := e.l.SetConfig("a", si.Config{Route: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Record(context.Background(), "a", si.Report{ConfigVersion: v2, Duration: time.Millisecond, Cost: 5}); err != nil {
		t.Fatal(err)
	}
	v, _ := e.l.View("a")
	if v.Versions[v2].Costed != 1 {
		t.Fatalf("version %d's figures %+v", v2, v.Versions[v2])
	}
	if got := v.Routes["backup"]; got.Costed != 1 || got.Cost != 5 {
		t.Errorf("Routes %+v: v%d ran on route \"backup\", its call's cost is booked elsewhere", v.Routes, v2)
	}
}
