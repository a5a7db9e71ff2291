package redisfleet_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
)

// The tests in this file run replicas as separate OS processes, each
// driven over its stdin and stdout; child_test.go is the replica's side,
// and describes the protocol.

// child is a replica running in its own process.
type child struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan reply
	extra chan map[string]string
	done  chan struct{}
}

// startChild starts a replica process on s with the given prefix and
// extra environment; it is killed when the test ends.
func startChild(t *testing.T, s *server, name, prefix string, env ...string) *child {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^TestFleetChild$", "-test.count=1")
	c.Env = append(os.Environ(), childEnv+"=1", "REDIS_ADDR="+s.addr, "PREFIX="+prefix)
	c.Env = append(c.Env, env...)
	c.Stderr = os.Stderr
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{t: t, name: name, cmd: c, in: in, lines: make(chan reply, 16), extra: make(chan map[string]string, 16), done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		sc := bufio.NewScanner(outp)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), childMark)
			if !ok {
				continue
			}
			var r reply
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				r.Err = "bad reply: " + line
			}
			if r.Extra != nil {
				ch.extra <- r.Extra
				continue
			}
			ch.lines <- r
		}
	}()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-ch.done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
		}
		c.Wait()
	})
	return ch
}

// do sends c and returns the reply; it fails the test after 30 seconds.
func (ch *child) do(c cmd) reply {
	ch.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := ch.in.Write(append(b, '\n')); err != nil {
		ch.t.Fatalf("%s: %v", ch.name, err)
	}
	select {
	case r := <-ch.lines:
		return r
	case <-ch.done:
		ch.t.Fatalf("%s exited during %s", ch.name, c.Op)
	case <-time.After(30 * time.Second):
		ch.t.Fatalf("%s: no answer to %s after 30s", ch.name, c.Op)
	}
	return reply{}
}

// must is do, failing the test on an error.
func (ch *child) must(c cmd) reply {
	ch.t.Helper()
	r := ch.do(c)
	if r.Err != "" {
		ch.t.Fatalf("%s: %s: %s", ch.name, c.Op, r.Err)
	}
	return r
}

// waitAll has every child in cs wait until it runs version v of id, in
// parallel, and returns the latest time one saw it (Unix ns).
func waitAll(t *testing.T, cs []*child, id string, v int) int64 {
	t.Helper()
	rs := make([]reply, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			b, _ := json.Marshal(cmd{Op: "wait", ID: id, V: v, Ms: 5000})
			c.in.Write(append(b, '\n'))
			select {
			case rs[i] = <-c.lines:
			case <-time.After(30 * time.Second):
				rs[i] = reply{Err: "no answer"}
			}
		})
	}
	wg.Wait()
	var last int64
	for i, r := range rs {
		if r.Err != "" {
			t.Fatalf("%s: waiting for version %d of %q: %s", cs[i].name, v, id, r.Err)
		}
		last = max(last, r.NS)
	}
	return last
}

// commands returns how many commands the Redis server has run, from INFO
// commandstats.
func commands(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, rest, _ := strings.Cut(line, ":calls=")
		v, _, _ := strings.Cut(rest, ",")
		k, _ := strconv.ParseInt(v, 10, 64)
		n += k
	}
	return n
}

// baseline runs the harmful-tweak script on one Loop with no fleet, and
// returns the calls made under the tweak until it was rolled back.
func baseline(t *testing.T) int {
	t.Helper()
	strat := &scriptStrategy{runs: map[string]int64{}}
	up := &upstream{faultAt: 30, n: map[string]int{}}
	l, err := si.New(childOptions(strat)...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetThreshold("a", si.Threshold{Failures: 5, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func() int {
		rep, _ := l.ExecuteWithImprovement(ctx, "a", func(_ context.Context, cfg si.Config) error { return up.call("a", cfg) })
		return rep.ConfigVersion
	}
	for i := 0; l.Config("a").Version == 1; i++ {
		if i > 200 {
			t.Fatal("baseline: no tweak applied")
		}
		call()
	}
	n := 0
	for l.Config("a").Version == 2 {
		if n > 300 {
			t.Fatal("baseline: the harmful tweak was not rolled back")
		}
		call()
		n++
	}
	return n
}

// roundRobin makes one call of id on each child in turn, each followed by
// a sync, until stop says so; it returns the calls made.
func roundRobin(t *testing.T, cs []*child, id string, limit int, stop func(i int, r reply) bool) int {
	t.Helper()
	for i := 0; ; i++ {
		if i >= limit {
			t.Fatalf("%q: still going after %d calls", id, limit)
		}
		r := cs[i%len(cs)].must(cmd{Op: "call", ID: id, Sync: true})
		if stop(i, r) {
			return i + 1
		}
	}
}

// TestFleetProcesses runs three replicas as OS processes on one Redis,
// under a scripted fault of agent "a": the fault crosses the pooled
// threshold, one replica's strategy applies a harmful tweak, every
// replica takes it within a second, the pooled calls roll it back after
// about as many calls as in one process, the rolled-back tweak is refused
// by another replica later, counts travel in batches, and a fresh replica
// gets it all on its first call.
func TestFleetProcesses(t *testing.T) {
	s := startRedis(t)
	one := baseline(t)
	const prefix = "proc:"
	cs := make([]*child, 3)
	for i := range cs {
		// Each child's upstream fails from its 10th call of "a": the
		// fleet's 30th, as in the single-process baseline.
		cs[i] = startChild(t, s, fmt.Sprintf("replica%d", i), prefix, "FAULT_AT=10")
	}
	cs[0].must(cmd{Op: "threshold", ID: "a", Failures: 5})

	applier := checkTweakSpreads(t, cs)
	checkPooledRollback(t, cs, one)
	checkRefusedAgain(t, cs[(applier+1)%3], cs)
	checkRacingTrigger(t, cs)
	checkBatched(t, s, cs)
	checkFreshReplica(t, s, prefix)
}

// checkTweakSpreads checks steps 1 and 2 of TestFleetProcesses: the pooled
// fault of "a" triggers one strategy run; its tweak is in force on every
// replica within 1 s. It returns the index of the replica that applied it.
func checkTweakSpreads(t *testing.T, cs []*child) int {
	t.Helper()
	applier := -1
	var appliedNS int64
	roundRobin(t, cs, "a", 200, func(i int, r reply) bool {
		if r.Improved {
			applier, appliedNS = i%3, r.NS
		}
		return r.After == 2
	})
	if applier < 0 {
		t.Fatal("version 2 in force, but no replica reports applying it")
	}
	seen := waitAll(t, cs, "a", 2)
	prop := time.Duration(max(0, seen-appliedNS))
	t.Logf("tweak applied by replica %d, in force on all three %v later", applier, prop)
	if prop > time.Second {
		t.Fatalf("the tweak took %v to reach every replica, more than 1s", prop)
	}
	if n, per := strategyRuns(t, cs, "a"); n != 1 {
		t.Fatalf("the strategy ran %d times for one trigger (per replica %v)", n, per)
	}
	return applier
}

// strategyRuns returns the strategy runs for id over the replicas cs, in
// all and per replica.
func strategyRuns(t *testing.T, cs []*child, id string) (total int64, per []int64) {
	t.Helper()
	for _, c := range cs {
		r := c.must(cmd{Op: "state", ID: id})
		total += r.Runs
		per = append(per, r.Runs)
	}
	return total, per
}

// checkPooledRollback checks step 3 of TestFleetProcesses, pooled
// verification: calls under the tweak on every replica count; it is
// rolled back after about the single-process number, one.
func checkPooledRollback(t *testing.T, cs []*child, one int) {
	t.Helper()
	var rolledNS int64
	three := roundRobin(t, cs, "a", 300, func(i int, r reply) bool {
		if r.RolledBack || r.After == 1 {
			rolledNS = r.NS
		}
		return r.After == 1
	})
	seen := waitAll(t, cs, "a", 1)
	t.Logf("harmful tweak rolled back after %d fleet-wide calls (one process: %d); in force everywhere %v later",
		three, one, time.Duration(max(0, seen-rolledNS)))
	if three > one+3 {
		t.Fatalf("three replicas rolled back after %d calls, one process after %d: verification is not pooled", three, one)
	}
	if seen-rolledNS > int64(time.Second) {
		t.Fatalf("the rollback took %v to reach every replica", time.Duration(seen-rolledNS))
	}
	var rollbacks int64
	for _, c := range cs {
		r := c.must(cmd{Op: "state", ID: "a"})
		rollbacks += r.Metrics.Rollbacks
		if !slices.Equal(r.Changes, []si.ChangeState{si.ChangeRolledBack}) {
			t.Fatalf("%s's changes: %v, want one rolled back", c.name, r.Changes)
		}
	}
	if rollbacks != 1 {
		t.Fatalf("%d rollbacks over the replicas, want 1 decision", rollbacks)
	}
}

// checkRefusedAgain checks step 4 of TestFleetProcesses: the fault goes on;
// the strategy, on other, a replica that did not apply the tweak, proposes
// it again: refused. Every replica remembers the rolled-back fix.
func checkRefusedAgain(t *testing.T, other *child, cs []*child) {
	t.Helper()
	before := other.must(cmd{Op: "state", ID: "a"})
	for range 20 {
		if r := other.must(cmd{Op: "call", ID: "a", Sync: true}); r.After != 1 {
			t.Fatalf("the rolled-back tweak was applied again by %s (version %d)", other.name, r.After)
		}
	}
	after := other.must(cmd{Op: "state", ID: "a"})
	if after.Runs == before.Runs || after.Metrics.RejectedTweaks == before.Metrics.RejectedTweaks {
		t.Fatalf("%s: strategy runs %d→%d, refused tweaks %d→%d: the rolled-back tweak was not refused there",
			other.name, before.Runs, after.Runs, before.Metrics.RejectedTweaks, after.Metrics.RejectedTweaks)
	}
	for _, c := range cs {
		if r := c.must(cmd{Op: "state", ID: "a"}); !r.Memory {
			t.Fatalf("%s's failure memory has no rolled-back fix for the fault", c.name)
		}
	}
}

// checkRacingTrigger checks step 2 of TestFleetProcesses again, racing:
// the three replicas fail at once on agent "r"; the strategy runs once.
func checkRacingTrigger(t *testing.T, cs []*child) {
	t.Helper()
	cs[1].must(cmd{Op: "threshold", ID: "r", Failures: 6})
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			for range 6 {
				b, _ := json.Marshal(cmd{Op: "call", ID: "r", Sync: true})
				c.in.Write(append(b, '\n'))
				<-c.lines
			}
		})
	}
	wg.Wait()
	waitAll(t, cs, "r", 2)
	if n, per := strategyRuns(t, cs, "r"); n != 1 {
		t.Fatalf("racing replicas ran the strategy %d times for one trigger (per replica %v)", n, per)
	}
}

// checkBatched checks step 5 of TestFleetProcesses, no round trip per
// call: 3 × 10,000 calls over 10 agents; the commands the replicas sent,
// their round trips, and the commands Redis ran (INFO commandstats, which
// counts those run by scripts). The replicas flush on a timer, so that
// the slower the calls (a loaded machine), the more flushes: the bounds
// are those of the flushes the replicas' policy allows in the time the
// step took (batchBounds), never one a call.
func checkBatched(t *testing.T, s *server, cs []*child) {
	t.Helper()
	const calls, agents = 3 * 10_000, 10
	admin := client(t, s)
	sent := func() (cmds, trips, live int64) {
		for _, c := range cs {
			r := c.must(cmd{Op: "state", ID: "p0"})
			cmds, trips, live = cmds+r.Sent, trips+r.Trips, max(live, r.Metrics.Agents)
		}
		return cmds, trips, live
	}
	window := time.Now()
	sent0, trips0, _ := sent()
	server0 := commands(t, admin)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.must(cmd{Op: "burst", N: calls / 3, Agents: agents}) })
	}
	wg.Wait()
	for _, c := range cs {
		c.must(cmd{Op: "sync"})
	}
	took := time.Since(start)
	server := commands(t, admin) - server0 - 1 // this INFO
	sent1, trips1, live := sent()
	b := batchBounds(time.Since(window), calls/3, agents, live)
	sentN, tripsN := sent1-sent0, trips1-trips0
	t.Logf("%d calls over %d agents on three replicas in %v: the replicas sent %d Redis commands in %d round trips; Redis ran %d commands, with those of the scripts (at most %d, %d and %d: %d flushes a replica)",
		calls, agents, took, sentN, tripsN, server, b.sent, b.trips, maxScriptCommands*sentN, b.flushes)
	if tripsN > b.trips || sentN > b.sent || server > maxScriptCommands*sentN {
		t.Fatalf("%d calls took %d round trips (at most %d), %d commands sent (at most %d), %d run (at most %d): counts are not batched",
			calls, tripsN, b.trips, sentN, b.sent, server, maxScriptCommands*sentN)
	}
}

// maxScriptCommands bounds the commands Redis runs for one command a
// replica of checkBatched sends, its own count with them: the most is
// addScript's, for an agent's delta without failures, scores or costs:
// its EVALSHA, 39 to check the counts (TYPE, HLEN, HSTRLEN of each of the
// 35 fields, two HMGET), 3 to check the failures, 6 for the batch, 1 for
// the generation and 2 to start a new one, 20 to add the change's and the
// control's counts and their totals, 1 LTRIM, 3 for the statistics, 3
// PEXPIRE, 6 to read the state's revision and 3 for the answer: 88.
const maxScriptCommands = 100

// bounds are the most a replica's flushes in a window may take (see
// batchBounds).
type bounds struct{ flushes, trips, sent int64 }

// batchBounds returns what the three replicas of checkBatched may send in
// a window of d in which each makes perReplica successful calls spread
// evenly over agents agents (none before: each loads each once), holds at
// most live agents, and syncs once. A replica flushes on its ticker, at
// most d/childFlushEvery + 1 times in d and once more for a tick that
// came during a flush before d, when an agent's calls not sent reach
// childFlushCalls, and at the sync. A flush sends the deltas of the
// agents with calls (of every live agent, on a poll) in one Add, and
// those of an agent whose delta went again or held an earlier
// generation's calls in at most two more (sendRest); it reads the notes
// on a poll, and sends the events logged (none here: the calls decide
// nothing). Every 5 seconds, and at the
// sync, a replica notes itself and reads the replicas seen (2 round
// trips). A connection the replica dials takes 3 (HELLO, CLIENT SETINFO
// twice); it uses at most two at once (the flusher's, the calls').
func batchBounds(d time.Duration, perReplica, agents, live int64) bounds {
	flushes := int64(d/childFlushEvery) + 2 + agents*(perReplica/agents/childFlushCalls) + 1
	seen := 2 * (int64(d/(5*time.Second)) + 1)
	const dials = 2 * 3
	return bounds{
		flushes: flushes,
		trips:   3 * (agents + flushes*5 + seen + dials),
		sent:    3 * (agents + flushes*(3*live+2) + seen + dials),
	}
}

// checkFreshReplica checks step 8 of TestFleetProcesses: a fresh replica,
// empty store, gets the agent's config, threshold, rejected tweak and
// memory on its first call.
func checkFreshReplica(t *testing.T, s *server, prefix string) {
	t.Helper()
	fresh := startChild(t, s, "fresh", prefix, "FAULT_AT=0")
	if r := fresh.must(cmd{Op: "call", ID: "a"}); r.Ran != 1 {
		t.Fatalf("fresh replica ran version %d", r.Ran)
	}
	fresh.must(cmd{Op: "sync"})
	fresh.must(cmd{Op: "sync"})
	r := fresh.must(cmd{Op: "state", ID: "a"})
	if r.Threshold.Failures != 5 || !slices.Equal(r.Changes, []si.ChangeState{si.ChangeRolledBack}) || !r.Memory ||
		len(r.History) == 0 || r.History[len(r.History)-1] != 1 {
		t.Fatalf("fresh replica: threshold %+v, changes %v, history %v, memory %v", r.Threshold, r.Changes, r.History, r.Memory)
	}
	for range 10 {
		if r := fresh.must(cmd{Op: "call", ID: "a"}); r.After != 1 {
			t.Fatalf("the fresh replica applied the rejected tweak (version %d)", r.After)
		}
	}
	if r2 := fresh.must(cmd{Op: "state", ID: "a"}); r2.Metrics.RejectedTweaks == 0 {
		t.Fatalf("the fresh replica refused no tweak: runs %d", r2.Runs)
	}
}

// leaseKey is the Redis key of agentID's lease under prefix.
func leaseKey(prefix, agentID string) string {
	h := sha256.Sum256([]byte(agentID))
	return prefix + "{" + hex.EncodeToString(h[:16]) + "}:l"
}

// TestFleetProcessKilled SIGKILLs replicas: one that applied a change
// under verification (the others decide on the pooled calls), and one
// that holds the lease in a strategy run (another runs the strategy once
// the lease expires). Each time the others finish within the lease's
// expiry plus 1 s.
func TestFleetProcessKilled(t *testing.T) {
	s := startRedis(t)
	const prefix = "kill:"
	// The lease lasts the strategy timeout (2 s) plus four fleet
	// timeouts (4 × 300 ms).
	const ttl = 2*time.Second + 4*300*time.Millisecond
	cs := []*child{
		startChild(t, s, "replica0", prefix, "FAULT_AT=10"),
		startChild(t, s, "replica1", prefix, "FAULT_AT=10"),
		startChild(t, s, "victim", prefix, "FAULT_AT=10"),
	}
	// Mid-verification: the victim applies the (harmful) tweak of "k1",
	// and dies at once.
	victim := cs[2]
	victim.must(cmd{Op: "threshold", ID: "k1", Failures: 3})
	for range 10 {
		for _, c := range cs {
			c.must(cmd{Op: "call", ID: "k1", Sync: true})
		}
	}
	var r reply
	for i := 0; !r.Improved; i++ {
		if i > 20 {
			t.Fatal("the victim applied no tweak")
		}
		r = victim.must(cmd{Op: "call", ID: "k1", Sync: true})
	}
	// The victim counted calls it has not sent (none here, as it synced);
	// calls go on on the others.
	waitAll(t, cs[:2], "k1", 2)
	victim.cmd.Process.Kill()
	killed := time.Now()
	roundRobin(t, cs[:2], "k1", 300, func(_ int, r reply) bool { return r.After == 1 })
	took := time.Since(killed)
	t.Logf("change of a killed replica rolled back by the others %v after the kill", took)
	if took > ttl+time.Second {
		t.Fatalf("verification finished %v after the kill, more than the lease's %v + 1s", took, ttl)
	}

	// Holding the lease: a new victim's strategy hangs on "k2"; it is
	// killed while it holds the lease.
	victim = startChild(t, s, "victim2", prefix, "BLOCK_K2=1")
	// Three failures trigger; the two others make one each, so that
	// only the victim can cross the threshold.
	victim.must(cmd{Op: "threshold", ID: "k2", Failures: 3})
	for _, c := range cs[:2] {
		c.must(cmd{Op: "call", ID: "k2"})
	}
	b, _ := json.Marshal(cmd{Op: "call", ID: "k2", N: 3})
	victim.in.Write(append(b, '\n'))
	select {
	case <-victim.extra:
	case <-time.After(30 * time.Second):
		t.Fatal("the victim's strategy did not start")
	}
	admin := client(t, s)
	if n, _ := admin.Exists(context.Background(), leaseKey(prefix, "k2")).Result(); n != 1 {
		t.Fatal("no lease in Redis while the victim runs the strategy")
	}
	victim.cmd.Process.Kill()
	killed = time.Now()
	gotRun := false
	roundRobin(t, cs[:2], "k2", 100000, func(_ int, r reply) bool {
		gotRun = r.After == 2
		return gotRun || time.Since(killed) > ttl+2*time.Second
	})
	took = time.Since(killed)
	if !gotRun {
		t.Fatalf("no replica ran the strategy of the dead lease holder's agent %v after the kill", took)
	}
	t.Logf("lease of a killed replica taken over %v after the kill (lease %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("another replica ran the strategy %v after the kill, more than the lease's %v + 1s", took, ttl)
	}
}
