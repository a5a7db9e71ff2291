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

func run(addr string) error {
	if addr == "" {
		a, stop, err := startRedis()
		if err != nil {
			return err
		}
		defer stop()
		addr = a
	}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6.0f ms  %s\n", float64(time.Since(start).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	const id = "summarizer"
	prefix := "fleet-example:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"

	// The upstream: the route "primary" fails once the fault starts;
	// "backup" works.
	var fault atomic.Bool
	upstream := func(_ context.Context, cfg si.Config) error {
		if fault.Load() && cfg.Route != "backup" {
			return errDown
		}
		return nil
	}
	var runs atomic.Int64 // strategy runs, over the three replicas
	strategy := si.StrategyFunc(func(_ context.Context, a si.Analysis) (*si.Tweak, error) {
		runs.Add(1)
		return &si.Tweak{Config: si.Config{Route: "backup", Timeout: a.Config.Timeout}, Reason: "primary route failing"}, nil
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var (
		reps   []*si.Loop
		fleets []*redisfleet.Fleet
	)
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		f, err := redisfleet.New(c, redisfleet.Options{Prefix: prefix})
		if err != nil {
			return err
		}
		defer f.Close()
		fleets = append(fleets, f)
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithFleet(f), si.WithStrategy(strategy), si.WithNotifier(nil), si.WithLogger(quiet),
			si.WithDefaultConfig(si.Config{Route: "primary"}))
		if err != nil {
			return err
		}
		defer l.Close()
		reps = append(reps, l)
	}
	ctx := context.Background()
	say("3 replicas on Redis %s, agent %q", addr, id)
	if err := reps[0].SetThreshold(id, si.Threshold{Failures: 5, Window: time.Minute, Cooldown: time.Minute}); err != nil {
		return err
	}
	calls := 0
	// call makes one call on the next replica and syncs it with the
	// fleet, as a busy service would every 200 ms.
	call := func() (int, si.Report) {
		r := calls % 3
		calls++
		rep, _ := reps[r].ExecuteWithImprovement(ctx, id, upstream)
		if err := reps[r].SyncFleet(ctx); err != nil {
			say("replica %d: %v", r, err)
		}
		return r, rep
	}
	for range 60 {
		call()
	}
	say("%d calls served by the 3 replicas on route %q (version %d)", calls, reps[0].Config(id).Route, reps[0].Config(id).Version)

	fault.Store(true)
	say("fault: route \"primary\" starts failing")
	var applied time.Time
	for applied.IsZero() {
		if calls > 1000 {
			return errors.New("no change applied")
		}
		r, rep := call()
		if rep.Improvement != nil {
			applied = time.Now()
			say("replica %d: pooled failures crossed the threshold; its strategy applied version %d (route %q)",
				r, rep.Improvement.To.Version, rep.Improvement.To.Route)
		}
	}
	v := reps[0].Config(id).Version
	for i, l := range reps {
		for l.Config(id).Version != v {
			time.Sleep(100 * time.Microsecond)
		}
		say("replica %d runs version %d (%v after it was applied)", i, v, time.Since(applied).Round(10*time.Microsecond))
	}
	before := calls
	for {
		if calls > before+5000 {
			return errors.New("the change was not decided after 5,000 calls")
		}
		call()
		chs := reps[0].Changes(id)
		if len(chs) > 0 && chs[len(chs)-1].State != si.ChangeVerifying {
			break
		}
	}
	for i, l := range reps {
		chs := l.Changes(id)
		last := chs[len(chs)-1]
		say("replica %d: change to version %d %s, running version %d", i, last.To.Version, last.State, l.Config(id).Version)
	}
	var decisions int64
	for _, l := range reps {
		m := l.Metrics()
		decisions += m.Confirmations + m.Rollbacks
	}
	say("%d decision for the fleet, on %d pooled calls (about %d a replica); %d strategy run in all", decisions, calls-before, (calls-before)/3, runs.Load())
	evs, err := fleets[0].Events(ctx, 10)
	if err != nil {
		return err
	}
	var types []si.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	say("the fleet's event log (a Redis stream): %v", types)
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
