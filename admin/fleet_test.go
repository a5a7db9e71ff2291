package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// switchFleet is an in-process fleet that can be made unreachable.
type switchFleet struct {
	*fleettest.Fleet
	down atomic.Bool
}

var errDown = fmt.Errorf("%w: connection refused", si.ErrFleetUnavailable)

func (f *switchFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.Fleet.Add(ctx, d)
}

func (f *switchFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	if f.down.Load() {
		return 0, errDown
	}
	return f.Fleet.Commit(ctx, id, rev, v)
}

// TestFleetVisible: with a fleet, /metrics and /api/fleet show it up or
// down, its commits and outages; without one, nothing of it.
func TestFleetVisible(t *testing.T) {
	plain, _ := newLoop(t)
	srv := httptest.NewServer(admin.Handler(plain, admin.Options{Token: token}))
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	if m := get("/metrics"); strings.Contains(m, "selfimprove_fleet_") {
		t.Error("fleet metrics without a fleet")
	}
	var st admin.FleetStatus
	if err := json.Unmarshal([]byte(get("/api/fleet")), &st); err != nil || st.Attached {
		t.Fatalf("/api/fleet without a fleet: %+v %v", st, err)
	}

	_, clk := newLoop(t)
	f := &switchFleet{Fleet: fleettest.New(clk)}
	l, clk := newLoop(t, si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	srv2 := httptest.NewServer(admin.Handler(l, admin.Options{Token: token}))
	defer srv2.Close()
	srv.URL = srv2.URL
	if err := l.SetConfig("a", si.Config{Route: "main"}); err != nil {
		t.Fatal(err)
	}
	f.down.Store(true)
	l.SyncFleet(context.Background())
	m := get("/metrics")
	for _, want := range []string{"selfimprove_fleet_up 0\n", "selfimprove_fleet_outages_total 1\n",
		"selfimprove_fleet_commit_seconds_count 1\n", `selfimprove_fleet_leases_total{result="taken"} 0` + "\n",
		"selfimprove_fleet_revision_lag 0\n", "# TYPE selfimprove_fleet_commit_seconds summary\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics: missing %q", want)
		}
	}
	if err := json.Unmarshal([]byte(get("/api/fleet")), &st); err != nil || !st.Attached || st.Up || st.Outages != 1 ||
		st.Commits != 1 || len(st.Events) != 1 || st.Events[0].Type != si.EventFleetUnreachable {
		t.Fatalf("/api/fleet while down: %+v %v", st, err)
	}
	f.down.Store(false)
	l.SyncFleet(context.Background())
	clk.Advance(2e9)
	l.SyncFleet(context.Background())
	if err := json.Unmarshal([]byte(get("/api/fleet")), &st); err != nil || !st.Up || len(st.Events) != 2 || st.Events[1].Type != si.EventFleetRecovered {
		t.Fatalf("/api/fleet once back: %+v %v", st, err)
	}
	if m := get("/metrics"); !strings.Contains(m, "selfimprove_fleet_up 1\n") {
		t.Error("/metrics: the fleet not up once back")
	}
}

// TestFleetReplicasListed: GET /api/fleet lists the replicas seen, this
// one marked, and /metrics counts them.
func TestFleetReplicasListed(t *testing.T) {
	f := fleettest.New(nil)
	other, _ := newLoop(t, si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	l, _ := newLoop(t, si.WithFleet(f), si.WithFleetFlush(0, 1<<20))
	for _, x := range []*si.Loop{other, l} {
		if err := x.SyncFleet(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	h := admin.Handler(l, admin.Options{Token: token})
	get := func(path string) string {
		req := httptest.NewRequest("GET", "http://localhost"+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	var st admin.FleetStatus
	if err := json.Unmarshal([]byte(get("/api/fleet")), &st); err != nil || len(st.Replicas) != 2 {
		t.Fatalf("/api/fleet: replicas %+v %v, want 2", st.Replicas, err)
	}
	names := map[string]bool{}
	for _, r := range st.Replicas {
		names[r.Name] = r.Self
		if !r.LastSeen.Equal(t0) {
			t.Errorf("replica %s last seen %v, want %v", r.Name, r.LastSeen, t0)
		}
	}
	if self, ok := names[st.Replica]; !ok || !self || names[other.Metrics().FleetReplica] {
		t.Fatalf("/api/fleet: replicas %+v: want %s (self) and %s", st.Replicas, st.Replica, other.Metrics().FleetReplica)
	}
	if m := get("/metrics"); !strings.Contains(m, "selfimprove_fleet_replicas 2\n") {
		t.Error("/metrics: selfimprove_fleet_replicas is not 2")
	}
}
