package selfimprove_test

import (
	"context"
	"fmt"

	"github.com/self-improving-loop/selfimprove"
)

// Subscribe delivers the events as the loop records them; Events reads
// the recent ones.
func ExampleLoop_Subscribe() {
	loop, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil))
	defer loop.Close()
	sub := loop.Subscribe("", 16)
	defer sub.Close()
	loop.MarkCritical("checkout", true)
	ev := <-sub.C
	fmt.Println(ev.Type, ev.AgentID)
	fmt.Println(len(loop.Events(selfimprove.EventFilter{AgentIDs: []string{"checkout"}})))
	// Output:
	// critical_set checkout
	// 1
}

// AgentMetrics reads each agent's counters, for a metrics exporter.
func ExampleLoop_AgentMetrics() {
	loop, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil))
	defer loop.Close()
	for range 3 {
		loop.ExecuteWithImprovement(context.Background(), "search", func(context.Context, selfimprove.Config) error { return nil })
	}
	for m := range loop.AgentMetrics() {
		fmt.Println(m.AgentID, m.Successes, m.Failures, m.Latency.Count, m.ConfigVersion, m.Circuit)
	}
	o, known := loop.Overview("search")
	fmt.Println(known, o.Stats.Calls, o.Config.Version)
	// Output:
	// search 3 0 3 1 closed
	// true 3 1
}
