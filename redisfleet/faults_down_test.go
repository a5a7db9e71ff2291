package redisfleet_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// TestRedisDownBacksOff kills Redis (connections refused) under the load
// of TestTimeoutHolds: failing calls crossing the threshold again and
// again, new agents and a SetConfig every 50 ms, on two replicas with
// go-redis's default client (3 retries, 5 dial attempts each). The
// replicas back off: only the flushers try Redis, and only the first
// operations of each replica wait out the fleet timeout (issue 28, D8:
// every failing call tried the lease, each paying the client's dial
// retries; p99 74-122 ms). When Redis is back, the replicas find it.
func TestRedisDownBacksOff(t *testing.T) {
	s := startRedis(t)
	ff := newFaultFleet(t, s, 2, "down:", plainClient(s))
	for _, l := range ff.ls {
		if err := l.SetThreshold("hot", si.Threshold{Failures: 2, Window: time.Minute}); err != nil && !errors.Is(err, si.ErrFleetConflict) {
			t.Fatal(err)
		}
		l.ExecuteWithImprovement(context.Background(), "hot", ok)
	}
	syncAllFleet(t, ff.ls)
	port, _ := strconv.Atoi(s.addr[strings.LastIndex(s.addr, ":")+1:])
	s.stop()

	const down = 2 * time.Second
	lat := &latencies{}
	stop := make(chan struct{})
	before, began := ff.trips(), time.Now()
	time.AfterFunc(down, func() { close(stop) })
	ff.drive(stop, lat).Wait()
	took := time.Since(began)
	sent := ff.trips() - before
	worst, p99, n := lat.stats()
	waited := lat.over(faultTimeout * 9 / 10)
	t.Logf("Redis down for %v: %d operations: max %v, p99 %v, %d waited out the fleet timeout; %d round trips tried by 2 replicas",
		took.Round(time.Millisecond), n, worst, p99, waited, sent)
	// A SetConfig may first wait, on the agent's save lock, for the
	// commit the replica's strategy had in flight when Redis went down;
	// TestTimeoutHolds bounds one operation's own wait.
	const margin = 100 * time.Millisecond // scheduling, under -race on 2 shared cores
	if worst > 2*faultTimeout+margin {
		t.Errorf("an operation waited %v with Redis down, more than twice the fleet timeout %v + %v", worst, faultTimeout, margin)
	}
	// Each replica finds Redis down once (a call, a SetConfig or a load
	// in flight then may wait out the timeout); then it backs off.
	if waited > 3*len(ff.ls) {
		t.Errorf("%d operations waited out the fleet timeout with Redis down: calls try Redis", waited)
	}
	// As in TestTimeoutHolds: the flusher tries once per flush (50 ms),
	// the poll once a second; calls do not try on their own.
	if limit := int64(took/(50*time.Millisecond))*4 + 40; sent > limit {
		t.Errorf("%d round trips tried in %v with Redis down, more than %d: calls try Redis", sent, took, limit)
	}
	for i, l := range ff.ls {
		if m := l.Metrics(); m.FleetDown != 1 || m.FleetOutages != 1 {
			t.Errorf("replica %d with Redis down: FleetDown %d, FleetOutages %d, want 1 and 1", i, m.FleetDown, m.FleetOutages)
		}
	}

	bin, _ := exec.LookPath("redis-server")
	s.start(t, bin, port, t.TempDir())
	for i, l := range ff.ls {
		if !waitFor(5*time.Second, func() bool { return l.Metrics().FleetDown == 0 }) {
			t.Errorf("replica %d still down 5s after Redis came back", i)
		}
	}
}

// over returns how many durations are at least d.
func (l *latencies) over(d time.Duration) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.d {
		if x >= d {
			n++
		}
	}
	return n
}
