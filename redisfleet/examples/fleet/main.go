// Command fleet runs three replicas of one service, each with its own
// Loop and Redis client, sharing one Redis: a fault hits an agent, one
// replica's strategy applies a change, every replica runs it, the pooled
// calls of the three verify it, and it is confirmed everywhere.
//
//	go run ./examples/fleet                 # starts its own redis-server
//	go run ./examples/fleet -redis host:6379 # or uses yours (keys under "fleet-example:")
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/redisfleet"
)

func main() {
	addr := flag.String("redis", "", "address of a Redis server (default: start redis-server on a free port)")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

var errDown = errors.New("upstream: 503 service unavailable")

// agentID is the agent the replicas share.
const agentID = "summarizer"

func run(addr string) error {
	if addr == "" {
		a, stop, err := startRedis()
		if err != nil {
			return err
		}
		defer stop()
		addr = a
	}
	d := &demo{ctx: context.Background(), start: time.Now()}
	defer d.close()
	prefix := "fleet-example:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	if err := d.open(addr, prefix); err != nil {
		return err
	}
	d.say("3 replicas on Redis %s, agent %q", addr, agentID)
	if err := d.reps[0].SetThreshold(agentID, si.Threshold{Failures: 5, Window: time.Minute, Cooldown: time.Minute}); err != nil {
		return err
	}
	for range 60 {
		d.call()
	}
	d.say("%d calls served by the 3 replicas on route %q (version %d)", d.calls, d.reps[0].Config(agentID).Route, d.reps[0].Config(agentID).Version)

	d.fault.Store(true)
	d.say("fault: route \"primary\" starts failing")
	applied, err := d.untilApplied()
	if err != nil {
		return err
	}
	d.waitForReplicas(applied)
	before := d.calls
	if err := d.untilDecided(); err != nil {
		return err
	}
	return d.report(before)
}

// demo is three replicas of one service, each with its own Loop and Redis
// client, sharing one Redis.
type demo struct {
	ctx     context.Context
	start   time.Time
	reps    []*si.Loop
	fleets  []*redisfleet.Fleet
	closers []func() error // in the order opened
	fault   atomic.Bool    // the route "primary" fails
	runs    atomic.Int64   // strategy runs, over the three replicas
	calls   int
}

// open opens the three replicas on the Redis at addr, with their keys
// under prefix.
func (d *demo) open(addr, prefix string) error {
	strategy := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		d.runs.Add(1)
		return &si.Tweak{Config: si.Config{Route: "backup", Timeout: a.Config.Timeout}, Reason: "primary route failing"}, nil
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		d.closers = append(d.closers, c.Close)
		f, err := redisfleet.New(c, redisfleet.Options{Prefix: prefix})
		if err != nil {
			return err
		}
		d.closers = append(d.closers, f.Close)
		d.fleets = append(d.fleets, f)
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithStrategy(strategy), si.WithNotifier(nil), si.WithLogger(quiet),
			si.WithDefaultConfig(si.Config{Route: "primary"}))
		if err != nil {
			return err
		}
		d.closers = append(d.closers, l.Close)
		d.reps = append(d.reps, l)
	}
	return nil
}

// close closes what open opened, last first.
func (d *demo) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// say prints a line with the time since the start.
func (d *demo) say(format string, args ...any) {
	fmt.Printf("%6.0f ms  %s\n", float64(time.Since(d.start).Microseconds())/1000, fmt.Sprintf(format, args...))
}

// upstream is the service's upstream: the route "primary" fails once the
// fault starts; "backup" works.
func (d *demo) upstream(_ context.Context, cfg si.Config) error {
	if d.fault.Load() && cfg.Route != "backup" {
		return errDown
	}
	return nil
}

// call makes one call on the next replica and syncs it with the fleet, as
// a busy service would every 200 ms.
func (d *demo) call() (int, si.Report) {
	r := d.calls % 3
	d.calls++
	rep, _ := d.reps[r].ExecuteWithImprovement(d.ctx, agentID, d.upstream)
	if err := d.reps[r].SyncFleet(d.ctx); err != nil {
		d.say("replica %d: %v", r, err)
	}
	return r, rep
}

// untilApplied calls until a replica's strategy applies a change, and
// returns when.
func (d *demo) untilApplied() (time.Time, error) {
	for {
		if d.calls > 1000 {
			return time.Time{}, errors.New("no change applied")
		}
		r, rep := d.call()
		if rep.Improvement != nil {
			applied := time.Now()
			d.say("replica %d: pooled failures crossed the threshold; its strategy applied version %d (route %q)",
				r, rep.Improvement.To.Version, rep.Improvement.To.Route)
			return applied, nil
		}
	}
}

// waitForReplicas waits until every replica runs the version of the first,
// the change applied at applied.
func (d *demo) waitForReplicas(applied time.Time) {
	v := d.reps[0].Config(agentID).Version
	for i, l := range d.reps {
		for l.Config(agentID).Version != v {
			time.Sleep(100 * time.Microsecond)
		}
		d.say("replica %d runs version %d (%v after it was applied)", i, v, time.Since(applied).Round(10*time.Microsecond))
	}
}

// untilDecided calls until the change is confirmed or rolled back.
func (d *demo) untilDecided() error {
	before := d.calls
	for {
		if d.calls > before+5000 {
			return errors.New("the change was not decided after 5,000 calls")
		}
		d.call()
		chs := d.reps[0].Changes(agentID)
		if len(chs) > 0 && chs[len(chs)-1].State != si.ChangeVerifying {
			return nil
		}
	}
}

// report prints each replica's view of the change, the fleet's decisions
// and strategy runs since the call numbered before, and its event log.
func (d *demo) report(before int) error {
	for i, l := range d.reps {
		chs := l.Changes(agentID)
		last := chs[len(chs)-1]
		d.say("replica %d: change to version %d %s, running version %d", i, last.To.Version, last.State, l.Config(agentID).Version)
	}
	var decisions int64
	for _, l := range d.reps {
		m := l.Metrics()
		decisions += m.Confirmations + m.Rollbacks
	}
	d.say("%d decision for the fleet, on %d pooled calls (about %d a replica); %d strategy run in all", decisions, d.calls-before, (d.calls-before)/3, d.runs.Load())
	evs, err := d.fleets[0].Events(d.ctx, 10)
	if err != nil {
		return err
	}
	var types []si.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	d.say("the fleet's event log (a Redis stream): %v", types)
	return nil
}

// startRedis starts redis-server on a free loopback port, in a temporary
// directory, without persistence.
func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (install with: apt-get install -y redis-server, or pass -redis): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "fleet-example")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("redis-server did not answer within 10s")
		}
	}
	return addr, stop, nil
}
