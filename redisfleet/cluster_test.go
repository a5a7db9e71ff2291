package redisfleet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// A 3-master Redis Cluster the test starts: three redis-server processes
// with cluster mode on free loopback ports, joined by redis-cli --cluster
// create, stopped by PID when the test ends.

// startCluster starts the cluster and returns its nodes' addresses.
// Without redis-server or redis-cli it skips (fails under CI).
func startCluster(t testing.TB) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	cli, cerr := exec.LookPath("redis-cli")
	if err != nil || cerr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server or redis-cli not found (CI): install with: apt-get install -y redis-server")
		}
		t.Skip("redis-server or redis-cli not found: install with: apt-get install -y redis-server")
	}
	var addrs []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		dir := t.TempDir()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s did not answer within 10s", addr)
			}
		}
		c.Close()
		addrs = append(addrs, addr)
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info, _ := c.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok after 20s: %s", addr, info)
			}
		}
		c.Close()
	}
	return addrs
}

func clusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSuiteCluster runs the fleet behavioural suite on a 3-master Redis
// Cluster: every agent's keys in one slot, the events, notes and channel
// on their nodes.
func TestSuiteCluster(t *testing.T) {
	addrs := startCluster(t)
	n := 0
	fleettest.Run(t, func(t *testing.T) (si.Fleet, si.Fleet) {
		n++
		prefix := fmt.Sprintf("csuite%d:", n)
		return newFleet(t, clusterClient(t, addrs), prefix), newFleet(t, clusterClient(t, addrs), prefix)
	})
}

// propagation measures, n times, how long a SetConfig on one replica
// takes to be in force on another, each with its own client.
func propagation(t testing.TB, n int, mk func() redis.UniversalClient) []time.Duration {
	t.Helper()
	ls := make([]*si.Loop, 2)
	for i := range ls {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet), si.WithFleet(newFleet(t, mk(), "prop:")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		l.ExecuteWithImprovement(context.Background(), "agent", ok)
		ls[i] = l
	}
	var d []time.Duration
	for len(d) < n {
		start := time.Now()
		if err := ls[0].SetConfig("agent", si.Config{Route: "r" + strconv.Itoa(len(d))}); err != nil {
			t.Fatal(err)
		}
		v := ls[0].Config("agent").Version
		for ls[1].Config("agent").Version != v {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("version %d not in force on the other replica after 5s", v)
			}
			time.Sleep(20 * time.Microsecond)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d
}

// TestPropagationFigures measures the propagation of a change between two
// replicas on a single Redis and on the 3-master cluster: p50, p99 and
// the worst of 300 changes each. It fails past a second.
func TestPropagationFigures(t *testing.T) {
	s := startRedis(t)
	addrs := startCluster(t)
	for _, c := range []struct {
		name string
		mk   func() redis.UniversalClient
	}{
		{"single Redis", func() redis.UniversalClient { return client(t, s) }},
		{"3-master cluster", func() redis.UniversalClient { return clusterClient(t, addrs) }},
	} {
		d := propagation(t, 300, c.mk)
		t.Logf("%s: propagation of 300 changes: p50 %v, p99 %v, worst %v", c.name,
			d[len(d)/2].Round(time.Microsecond), d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
		if d[len(d)-1] > time.Second {
			t.Errorf("%s: a change took %v to propagate", c.name, d[len(d)-1])
		}
	}
}
