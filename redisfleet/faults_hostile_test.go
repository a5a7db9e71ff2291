package redisfleet_test

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	si "github.com/self-improving-loop/selfimprove"
)

// checkReplaced checks that the next decision replaces each bad state of
// ids, on every replica.
func checkReplaced(t *testing.T, ls []*si.Loop, ids []string) {
	t.Helper()
	for _, id := range ids {
		var err error
		for try := 0; try < 3; try++ {
			if err = ls[try%2].SetConfig(id, si.Config{Route: "fixed"}); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("agent %q: SetConfig fails 3 times: %v", id, err)
			continue
		}
		v := ls[0].Config(id).Version
		if v2 := ls[1].Config(id); v2.Route != "fixed" && !waitFor(2*time.Second, func() bool { return ls[1].Config(id).Route == "fixed" && ls[0].Config(id).Route == "fixed" }) {
			t.Errorf("agent %q: replica 0 runs version %d, replica 1 %+v", id, v, ls[1].Config(id))
		}
	}
}

// plantHostile plants, under prefix, the hostile values of
// TestHostileKeys. It plants with a client of its own that waits as long
// as Redis takes and sends each script once: building 100 MB in Lua takes
// seconds on a loaded machine, past go-redis's 3 s read timeout, and a
// retry would plant it again.
func plantHostile(t *testing.T, admin *redis.Client, prefix string) {
	admin = redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ReadTimeout: -1, MaxRetries: -1})
	defer admin.Close()
	key := func(id, part string) string { return agentKey(prefix, id, part) }
	bump := `redis.call('HINCRBY', KEYS[1], 'rev', 1) `
	plant(t, admin, bump+`redis.call('HSET', KEYS[1], 'val', string.rep('x', 100 * 1024 * 1024), 'len', '10')`, key("big", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'rev', '4611686018427387904')`, key("rev62", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'rev', '18446744073709551615')`, key("revmax", "s"))
	plant(t, admin, bump+`redis.call('HSET', KEYS[1], 'val', '{not json')`, key("json", "s"))
	plant(t, admin, `redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], 'x')`, key("type", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'tl', '-9000000000000000000', 'tc', '5')`, key("neg", "n"))
	plant(t, admin, `redis.call('RPUSH', KEYS[1], 'x', '1 {not json', '2 {"gen":1,"text":"`+
		`'..string.rep('y', 10000)..'"}', '3 {"gen":1,"duration_ns":-5,"end_ns":-1,"class":"bogus","text":"z"}')`, key("fails", "f"))
}

// countingClient is ctxClient whose connections add the bytes they read
// to read: what the replicas download from Redis.
func countingClient(s *server, read *atomic.Int64) func() *redis.Client {
	return func() *redis.Client { return countedClient(s, read, nil) }
}

// countedClient is a ctxClient whose connections add the bytes they read
// to read, and those they write to wrote (each when not nil).
func countedClient(s *server, read, wrote *atomic.Int64) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return byteCounter{c, read, wrote}, nil
		}})
}

// byteCounter is a connection that counts the bytes it reads and writes.
type byteCounter struct {
	net.Conn
	read, wrote *atomic.Int64
}

func (c byteCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.read != nil {
		c.read.Add(int64(n))
	}
	return n, err
}

func (c byteCounter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.wrote != nil {
		c.wrote.Add(int64(n))
	}
	return n, err
}

// events returns the events the replicas hold (their recent events),
// but those of agent "fails", whose failing calls run the strategy, and
// those of the fleet's outages (planting 100 MB blocks Redis for seconds
// on a loaded machine; TestFleetOutageEvents counts them).
func (ff *faultFleet) events() (evs []string) {
	for _, l := range ff.ls {
		for _, e := range l.Events(si.EventFilter{Limit: 1 << 20}) {
			if e.AgentID != "fails" && e.Type != si.EventFleetUnreachable && e.Type != si.EventFleetRecovered {
				evs = append(evs, e.ID+" "+string(e.Type)+" "+e.AgentID)
			}
		}
	}
	return evs
}

// windowStats is what hostileWindow measured.
type windowStats struct {
	calls              int64 // calls of agent "ok"
	alloc, peak, heap0 uint64
}

// hostileWindow calls every agent of ids on every replica, and "fails"
// with a failure, for d, sampling the heap.
func (ff *faultFleet) hostileWindow(ids []string, d time.Duration) windowStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := windowStats{peak: ms.HeapInuse, heap0: ms.HeapInuse}
	alloc0 := ms.TotalAlloc
	ctx := context.Background()
	for began := time.Now(); time.Since(began) < d; {
		for _, l := range ff.ls {
			for _, id := range ids {
				l.ExecuteWithImprovement(ctx, id, ok)
			}
			l.ExecuteWithImprovement(ctx, "fails", failing)
			w.calls++
		}
		runtime.ReadMemStats(&ms)
		w.peak = max(w.peak, ms.HeapInuse)
		time.Sleep(5 * time.Millisecond)
	}
	runtime.ReadMemStats(&ms)
	w.alloc = ms.TotalAlloc - alloc0
	return w
}
