package redisfleet_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/redisfleet"
)

// The tests in process_test.go run replicas as separate OS processes: the
// test binary re-executed with -test.run=^TestFleetChild$ and childEnv set.
// A child runs one Loop on the shared Redis and answers commands, one JSON
// line on its stdin each, with one JSON line on its stdout (prefixed with
// childMark, so that the testing package's own lines are told apart). This
// file is the child's side; process_test.go starts children and drives
// them.

const (
	childEnv  = "REDISFLEET_TEST_CHILD"
	childMark = "@@"
)

// cmd is a command to a child.
type cmd struct {
	Op   string `json:"op"`
	ID   string `json:"id,omitempty"`
	N    int    `json:"n,omitempty"`
	Sync bool   `json:"sync,omitempty"`
	// Route for "set"; V and Ms for "wait"; Agents for "burst";
	// Failures and Cooldown for "threshold".
	Route    string        `json:"route,omitempty"`
	V        int           `json:"v,omitempty"`
	Ms       int           `json:"ms,omitempty"`
	Agents   int           `json:"agents,omitempty"`
	Failures int           `json:"failures,omitempty"`
	Cooldown time.Duration `json:"cooldown,omitempty"`
}

// reply is a child's answer.
type reply struct {
	Err string `json:"err,omitempty"`
	// call: the version the call ran under, the version after it (and
	// the sync), whether it applied or rolled back a change.
	Ran        int  `json:"ran,omitempty"`
	After      int  `json:"after,omitempty"`
	Improved   bool `json:"improved,omitempty"`
	RolledBack bool `json:"rolled_back,omitempty"`
	// NS is the child's wall clock (Unix ns) when the command was done.
	NS int64 `json:"ns,omitempty"`
	// state
	Runs      int64             `json:"runs,omitempty"`
	Metrics   si.Metrics        `json:"metrics"`
	Threshold si.Threshold      `json:"threshold"`
	History   []int             `json:"history,omitempty"`
	Changes   []si.ChangeState  `json:"changes,omitempty"`
	Memory    bool              `json:"memory,omitempty"`
	RunsByID  map[string]int64  `json:"runs_by_id,omitempty"`
	Extra     map[string]string `json:"extra,omitempty"`
	// Sent and Trips are the commands this process sent to Redis, and
	// the round trips they took (a pipeline is one).
	Sent  int64 `json:"sent,omitempty"`
	Trips int64 `json:"trips,omitempty"`
}

// countHook counts the commands a client sends, and its round trips.
type countHook struct{ cmds, trips atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.cmds.Add(1)
		h.trips.Add(1)
		return next(ctx, c)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cs []redis.Cmder) error {
		h.cmds.Add(int64(len(cs)))
		h.trips.Add(1)
		return next(ctx, cs)
	}
}

// upstream is a child's scripted upstream: agents "a" and "k1" fail
// from the child's faultAt-th call of them on; "r" fails unless routed to
// "alt"; the route "backup" and the agents starting with "k2" always
// fail.
type upstream struct {
	faultAt int
	mu      sync.Mutex
	n       map[string]int
}

var errUpstream = errors.New("upstream: 503 service unavailable")

func (u *upstream) call(id string, cfg si.Config) error {
	u.mu.Lock()
	n := u.n[id]
	u.n[id]++
	u.mu.Unlock()
	switch {
	case cfg.Route == "backup", strings.HasPrefix(id, "k2"):
		return errUpstream
	case (id == "a" || id == "k1") && n >= u.faultAt:
		return errUpstream
	case id == "r" && cfg.Route != "alt":
		return errUpstream
	}
	return nil
}

// scriptStrategy proposes "alt" for agent "r" and "backup" for the
// others, and counts its runs per agent. With block set it waits for its
// context on agents starting with "k2".
type scriptStrategy struct {
	mu    sync.Mutex
	runs  map[string]int64
	block bool
}

func (s *scriptStrategy) Analyze(ctx context.Context, a si.Analysis) (*si.Tweak, error) {
	s.mu.Lock()
	s.runs[a.AgentID]++
	s.mu.Unlock()
	if s.block && strings.HasPrefix(a.AgentID, "k2") {
		fmt.Fprintln(os.Stdout, childMark+`{"extra":{"blocked":"`+a.AgentID+`"}}`)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	route := "backup"
	if a.AgentID == "r" {
		route = "alt"
	}
	return &si.Tweak{Config: si.Config{Route: route}, Reason: "route around the fault"}, nil
}

// childOptions are the options every replica runs with, and the single
// process of the baseline.
func childOptions(strat si.Strategy) []si.Option {
	return []si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithStrategy(strat),
		si.WithRollbackPolicy(si.RollbackPolicy{MinBeforeCalls: -1}), si.WithStrategyTimeout(2 * time.Second),
		si.WithRetryPolicy(si.RetryPolicy{TransientAttempts: 1})} // the fleet's figures, not the retries' waits
}

// childFlushEvery and childFlushCalls are the replicas' flush policy
// (WithFleetFlush): every 200 ms, and when an agent's calls not sent
// reach 1,024. checkBatched bounds the replicas' round trips by it.
const (
	childFlushEvery = 200 * time.Millisecond
	childFlushCalls = 1024
)

// TestFleetChild is a replica when childEnv is set (see startChild); it
// does nothing otherwise.
func TestFleetChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		return
	}
	faultAt, _ := strconv.Atoi(os.Getenv("FAULT_AT"))
	rp := &replica{
		up:    &upstream{faultAt: faultAt, n: map[string]int{}},
		strat: &scriptStrategy{runs: map[string]int64{}, block: os.Getenv("BLOCK_K2") != ""},
		hook:  &countHook{},
	}
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer c.Close()
	c.AddHook(rp.hook)
	f, err := redisfleet.New(c, redisfleet.Options{Prefix: os.Getenv("PREFIX")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rp.l, err = si.New(append(childOptions(rp.strat), si.WithFleet(f), si.WithFleetTimeout(300*time.Millisecond),
		si.WithFleetFlush(childFlushEvery, childFlushCalls))...)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	send := func(r reply) {
		b, _ := json.Marshal(r)
		outMu.Lock()
		out.WriteString(childMark)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
		outMu.Unlock()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var c cmd
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			send(reply{Err: err.Error()})
			continue
		}
		if c.Op == "exit" {
			send(reply{Err: errString(rp.l.Close()), NS: time.Now().UnixNano()})
			return
		}
		r := rp.do(c)
		r.NS = time.Now().UnixNano()
		send(r)
	}
	rp.l.Close()
}

// replica is what a child runs: a Loop on the shared Redis, with the
// scripted upstream and strategy, and the count of its Redis commands.
type replica struct {
	l     *si.Loop
	up    *upstream
	strat *scriptStrategy
	hook  *countHook
}

// do carries out c, any command but "exit", and returns the reply.
func (rp *replica) do(c cmd) reply {
	ctx := context.Background()
	var r reply
	switch c.Op {
	case "call":
		r = rp.call(c)
	case "burst":
		// N successful calls spread over Agents agents, as fast as
		// they go; the background flush sends the counts.
		for i := range c.N {
			id := "p" + strconv.Itoa(i%c.Agents)
			rp.l.ExecuteWithImprovement(ctx, id, func(context.Context, si.Config) error { return nil })
		}
	case "sync":
		if err := rp.l.SyncFleet(ctx); err != nil {
			r.Err = err.Error()
		}
	case "set":
		if err := rp.l.SetConfig(c.ID, si.Config{Route: c.Route}); err != nil {
			r.Err = err.Error()
		}
		r.After = rp.l.Config(c.ID).Version
	case "threshold":
		if err := rp.l.SetThreshold(c.ID, si.Threshold{Failures: c.Failures, Window: time.Minute, Cooldown: c.Cooldown}); err != nil {
			r.Err = err.Error()
		}
	case "wait":
		r.Err = rp.wait(c.ID, c.V, c.Ms)
	case "state":
		r = rp.state(c.ID)
	default:
		r.Err = "unknown op " + c.Op
	}
	return r
}

// call makes max(c.N, 1) calls of c.ID, each followed by a sync if c.Sync.
func (rp *replica) call(c cmd) reply {
	ctx := context.Background()
	var r reply
	for range max(c.N, 1) {
		rep, _ := rp.l.ExecuteWithImprovement(ctx, c.ID, func(_ context.Context, cfg si.Config) error { return rp.up.call(c.ID, cfg) })
		r.Ran = rep.ConfigVersion
		r.Improved = r.Improved || rep.Improvement != nil
		r.RolledBack = r.RolledBack || rep.Rollback != nil
		if c.Sync {
			if err := rp.l.SyncFleet(ctx); err != nil {
				r.Err = err.Error()
			}
		}
	}
	r.After = rp.l.Config(c.ID).Version
	return r
}

// wait waits at most ms milliseconds until id runs version v, and returns
// an error text if it does not.
func (rp *replica) wait(id string, v, ms int) string {
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for rp.l.Config(id).Version != v {
		if time.Now().After(deadline) {
			return fmt.Sprintf("version %d, not %d, after %d ms", rp.l.Config(id).Version, v, ms)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return ""
}

// state returns the replica's view of id, its strategy runs, metrics and
// Redis commands.
func (rp *replica) state(id string) reply {
	var r reply
	rp.strat.mu.Lock()
	r.RunsByID = maps(rp.strat.runs)
	r.Runs = rp.strat.runs[id]
	rp.strat.mu.Unlock()
	r.Metrics = rp.l.Metrics()
	r.Threshold, _ = rp.l.Threshold(id)
	for _, h := range rp.l.History(id) {
		r.History = append(r.History, h.Version)
	}
	for _, ch := range rp.l.Changes(id) {
		r.Changes = append(r.Changes, ch.State)
	}
	r.Memory = rolledBackInMemory(rp.l, errUpstream.Error())
	r.After = rp.l.Config(id).Version
	r.Sent, r.Trips = rp.hook.cmds.Load(), rp.hook.trips.Load()
	return r
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func rolledBackInMemory(l *si.Loop, text string) bool {
	for _, m := range l.Similar(text, 3) {
		for _, f := range m.Fixes {
			if f.State == si.FixRolledBack {
				return true
			}
		}
	}
	return false
}
