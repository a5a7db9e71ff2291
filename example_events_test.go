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

// Views reads each agent's counters without its lock, for a metrics
// exporter; View reads all that the loop knows of one agent.
func ExampleLoop_Views() {
	loop, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil))
	defer loop.Close()
	for range 3 {
		loop.ExecuteWithImprovement(context.Background(), "search", func(context.Context, selfimprove.Config) error { return nil })
	}
	for v := range loop.Views() {
		fmt.Println(v.AgentID, v.Successes, v.Failures, v.Latency.Count, v.Config.Version, v.Circuit)
	}
	v, known := loop.View("search")
	fmt.Println(known, v.Stats.Calls, v.Config.Version, v.Successes, v.Health)
	// Output:
	// search 3 0 3 1 closed
	// true 3 1 3 1
}
