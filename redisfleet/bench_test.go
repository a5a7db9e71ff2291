package redisfleet_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// BenchmarkSuccessPath is a successful call on a known agent, without a
// fleet and with a Redis fleet attached, in the same run: the call path
// only counts, so the two should differ by a few nanoseconds and neither
// allocates.
func BenchmarkSuccessPath(b *testing.B) {
	s := startRedis(b)
	ctx := context.Background()
	fn := func(context.Context, si.Config) error { return nil }
	for _, withFleet := range []bool{false, true} {
		name := "no-fleet"
		opts := []si.Option{si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet)}
		if withFleet {
			name = "redis-fleet"
			opts = append(opts, si.WithFleet(newFleet(b, client(b, s), "bench:")))
		}
		b.Run(name, func(b *testing.B) {
			l, err := si.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			l.ExecuteWithImprovement(ctx, "agent", fn)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.ExecuteWithImprovement(ctx, "agent", fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommandsAt10kCalls runs one replica at 10,000 successful
// calls a second over 100 agents for two seconds (whatever b.N is) and
// reports the Redis commands it sent a second, their round trips a
// second, the kilobytes it sent a second (the agents' statistics among
// them) and the commands Redis ran a second (INFO commandstats, which
// counts those run inside the scripts too). Its ns/op means nothing.
func BenchmarkCommandsAt10kCalls(b *testing.B) {
	s := startRedis(b)
	var wrote atomic.Int64
	c := countedClient(s, nil, &wrote)
	b.Cleanup(func() { c.Close() })
	hook := &countHook{}
	c.AddHook(hook)
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithFleet(newFleet(b, c, "rate:")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	fn := func(context.Context, si.Config) error { return nil }
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = "agent-" + strconv.Itoa(i)
		l.ExecuteWithImprovement(ctx, ids[i], fn)
	}
	admin := client(b, s)
	sent0, trips0, server0, wrote0 := hook.cmds.Load(), hook.trips.Load(), commands(b, admin), wrote.Load()
	const dur, tick = 2 * time.Second, 10 * time.Millisecond
	t := time.NewTicker(tick)
	start := time.Now()
	calls := 0
	for time.Since(start) < dur {
		<-t.C
		for _, id := range ids { // 100 calls a tick: 10,000 a second
			l.ExecuteWithImprovement(ctx, id, fn)
			calls++
		}
	}
	t.Stop()
	el := time.Since(start).Seconds()
	server := commands(b, admin) - server0 - 1
	b.ReportMetric(float64(calls)/el, "calls/s")
	b.ReportMetric(float64(hook.cmds.Load()-sent0)/el, "sent-cmds/s")
	b.ReportMetric(float64(hook.trips.Load()-trips0)/el, "round-trips/s")
	b.ReportMetric(float64(server)/el, "server-cmds/s")
	b.ReportMetric(float64(wrote.Load()-wrote0)/el/1e3, "sent-kB/s")
}

// BenchmarkPropagation measures how long a change takes from the call of
// SetConfig on one replica until it is in force on another (each with its
// own client): ns/op is the mean; it reports the median, the 99th
// percentile and the worst, over at least 200 changes.
func BenchmarkPropagation(b *testing.B) {
	s := startRedis(b)
	ls := make([]*si.Loop, 2)
	for i := range ls {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithFleet(newFleet(b, client(b, s), "prop:")))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		l.ExecuteWithImprovement(context.Background(), "agent", func(context.Context, si.Config) error { return nil })
		ls[i] = l
	}
	var d []time.Duration
	sample := func() {
		start := time.Now()
		if err := ls[0].SetConfig("agent", si.Config{Route: "r" + strconv.Itoa(len(d))}); err != nil {
			b.Fatal(err)
		}
		v := ls[0].Config("agent").Version
		for ls[1].Config("agent").Version != v {
			if time.Since(start) > 5*time.Second {
				b.Fatalf("version %d not in force on the other replica after 5s", v)
			}
			time.Sleep(20 * time.Microsecond)
		}
		d = append(d, time.Since(start))
	}
	for b.Loop() {
		sample()
	}
	for len(d) < 200 {
		sample()
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "max-ms")
}
