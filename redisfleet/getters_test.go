package redisfleet_test

import (
	"context"
	"encoding/json"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	si "github.com/self-improving-loop/selfimprove"
)

// TestGettersFromFleet: a replica that never loaded an agent answers its
// getters from the fleet's state, at once after another replica's
// SetConfig returned (issue 28, item 5).
func TestGettersFromFleet(t *testing.T) {
	s := startRedis(t)
	ls := replicas(t, s, 3)
	ctx := context.Background()
	// Replica 0 knows the agent; replicas 1 and 2 never load it.
	if _, err := ls[0].ExecuteWithImprovement(ctx, "getter", ok); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ls[0].SetConfig("getter", si.Config{Route: "r" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
		want := ls[0].Config("getter")
		for _, l := range ls[1:] {
			if got := l.Config("getter"); got.Version != want.Version || got.Route != want.Route {
				t.Fatalf("after SetConfig %d: a replica that never loaded the agent reports version %d route %q, want %d %q",
					i, got.Version, got.Route, want.Version, want.Route)
			}
			if h := l.History("getter"); len(h) != len(ls[0].History("getter")) {
				t.Fatalf("History: %d configs, want %d", len(h), len(ls[0].History("getter")))
			}
			if v, known := l.View("getter"); !known || v.Config.Version != want.Version || v.Loaded {
				t.Fatalf("View: known %v loaded %v version %d, want known, not loaded, %d", known, v.Loaded, v.Config.Version, want.Version)
			}
		}
	}
	if err := ls[0].SetThreshold("getter", si.Threshold{Failures: 7, Window: 60e9}); err != nil {
		t.Fatal(err)
	}
	if th, _ := ls[2].Threshold("getter"); th.Failures != 7 {
		t.Fatalf("Threshold on another replica: %+v, want Failures 7", th)
	}
	// Stats, Health and Clusters count the fleet's calls: 9 more on
	// replica 0, 3 of them failing, reach the others with its next
	// statistics (sent at most every 2 seconds).
	for i := range 9 {
		fn := ok
		if i%3 == 0 {
			fn = failing
		}
		ls[0].ExecuteWithImprovement(ctx, "getter", fn)
	}
	want := ls[0].Stats("getter")
	if !waitFor(5*time.Second, func() bool {
		ls[0].SyncFleet(ctx)
		return ls[1].Stats("getter").TotalCalls == 10 && ls[2].Stats("getter").TotalCalls == 10
	}) {
		t.Fatalf("Stats on replicas that never loaded the agent: %d and %d calls in all, want the fleet's 10",
			ls[1].Stats("getter").TotalCalls, ls[2].Stats("getter").TotalCalls)
	}
	for _, l := range ls[1:] {
		if st := l.Stats("getter"); st.Failures != 3 || st.Calls != want.Calls {
			t.Fatalf("Stats: %d calls, %d failures in the window; want replica 0's %d and 3", st.Calls, st.Failures, want.Calls)
		}
		if h := l.Health("getter"); h >= 0.99 {
			t.Fatalf("Health %v, want the fleet's (3 failures in 10 calls)", h)
		}
		if cs := l.Clusters("getter"); len(cs) != 1 || cs[0].Count != 3 {
			t.Fatalf("Clusters %+v, want one of 3 failures", cs)
		}
	}
	// The getters create no agent on the replicas that read them.
	for i, l := range ls[1:] {
		for id := range l.Views() {
			t.Fatalf("replica %d loaded agent %q by reading it", i+1, id.AgentID)
		}
	}
	// An agent the fleet does not know gets the documented answers.
	if c := ls[1].Config("nobody"); c.Version != ls[1].Config("nobody2").Version {
		t.Fatalf("unknown agents differ: %+v", c)
	}
	if _, known := ls[1].View("nobody"); known {
		t.Fatal("View of an agent nobody knows: known")
	}
}

// TestHostileStats plants, in the statistics key of agents that replica
// 0 runs, what no replica writes: 32 MB under the agent's ID, a key of
// the wrong type, a value that is not a state, another agent's. A
// replica that has not loaded them reads none of the 32 MB, reports each
// bad value once a minute (the value is set aside, or replaced by the
// next statistics sent) and falls back on its own statistics; the agent's
// other getters, and the other agents' statistics, still answer from
// the fleet.
func TestHostileStats(t *testing.T) {
	s := startRedis(t)
	admin := client(t, s)
	ctx := context.Background()
	const prefix = "hstats:"
	var read atomic.Int64
	ff := newFaultFleet(t, s, 2, prefix, countingClient(s, &read))
	ids := []string{"s-ok", "s-big", "s-type", "s-json", "s-other"}
	for _, id := range ids {
		for range 4 {
			ff.ls[0].ExecuteWithImprovement(ctx, id, ok)
		}
		if err := ff.ls[0].SetConfig(id, si.Config{Route: "set"}); err != nil {
			t.Fatal(err)
		}
	}
	syncAllFleet(t, ff.ls)
	big := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: -1, MaxRetries: -1})
	defer big.Close()
	key := func(id string) string { return agentKey(prefix, id, "t") }
	plant(t, big, `redis.call('DEL', KEYS[1]) redis.call('HSET', KEYS[1], 'val', string.rep('x', 32 * 1024 * 1024), 'id', 's-big')`, key("s-big"))
	plant(t, admin, `redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], 'x')`, key("s-type"))
	plant(t, admin, `redis.call('DEL', KEYS[1]) redis.call('HSET', KEYS[1], 'val', '{not json', 'id', 's-json')`, key("s-json"))
	plant(t, admin, `redis.call('DEL', KEYS[1]) redis.call('HSET', KEYS[1], 'val', '{}', 'id', 'someone else')`, key("s-other"))
	// Building 32 MB blocks Redis for a while: the replicas may have
	// found it down, and back off until their flusher finds it again.
	syncAllFleet(t, ff.ls)
	if !waitFor(5*time.Second, func() bool { return ff.ls[0].Metrics().FleetDown == 0 && ff.ls[1].Metrics().FleetDown == 0 }) {
		t.Fatal("the replicas still find the fleet down 5 s after the values were planted")
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, read0, logs0 := ms.HeapInuse, read.Load(), ff.logs.n.Load()
	l := ff.ls[1]
	for range 3 {
		for _, id := range ids[1:] {
			if st := l.Stats(id); st.Calls != 0 {
				t.Fatalf("agent %q: Stats from hostile statistics: %d calls, want this replica's own: 0", id, st.Calls)
			}
			if c := l.Config(id); c.Route != "set" {
				t.Fatalf("agent %q: Config %+v, want the fleet's route (logs: %v)", id, c, ff.logs.msgs)
			}
		}
	}
	runtime.ReadMemStats(&ms)
	down, lines := read.Load()-read0, ff.logs.n.Load()-logs0
	t.Logf("3 reads of 4 hostile statistics: %d bytes read from Redis, heap %+.1f MB, %d log lines", down, (float64(ms.HeapInuse)-float64(heap0))/1e6, lines)
	if down > 1<<20 || ms.HeapInuse > heap0+8<<20 {
		t.Errorf("%d bytes read, heap up %d bytes, with 32 MB planted: downloaded beyond the cap", down, ms.HeapInuse-heap0)
	}
	if lines > int64(len(ids)-1) {
		t.Errorf("%d log lines for 4 bad statistics read 3 times each, want at most 4 (once a minute per agent)", lines)
	}
	if st := l.Stats("s-ok"); st.Calls != 4 {
		t.Fatalf("the healthy agent's Stats: %d calls, want the fleet's 4", st.Calls)
	}
	for _, id := range []string{"s-big", "s-type", "s-other"} {
		if n, _ := admin.Exists(ctx, key(id)+"-bad").Result(); n != 1 {
			t.Errorf("agent %q: bad statistics not set aside", id)
		}
	}
	// The next statistics sent replace the value that is not a state.
	if !waitFor(5*time.Second, func() bool {
		ff.ls[0].ExecuteWithImprovement(ctx, "s-json", ok)
		ff.ls[0].SyncFleet(ctx)
		return l.Stats("s-json").Calls > 4
	}) {
		t.Fatalf("s-json: Stats %d calls after replica 0 sent its statistics again", l.Stats("s-json").Calls)
	}
	setAside(t, newFleet(t, admin, prefix), "s-type")
}

// setAside checks that the fleet f holds no bad statistics of agent id,
// set aside: none, or the statistics of id a replica sent since (they are
// owed when its calls after the last ones it sent met the 2 s between
// sends: on a loaded machine, a flush during the calls sends them early,
// and the rest 2 s later).
func setAside(t *testing.T, f si.Fleet, id string) {
	t.Helper()
	b, err := f.LoadStats(context.Background(), id)
	var doc struct {
		AgentID string `json:"agent_id"`
	}
	if err != nil || b != nil && (json.Unmarshal(b, &doc) != nil || doc.AgentID != id) {
		t.Fatalf("LoadStats after the bad value was set aside: %q, %v; want none, or statistics of %s sent since", b, err, id)
	}
}
