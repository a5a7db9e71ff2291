// Package compare measures the loop against gobreaker v2, the lightest
// widely used Go resilience wrapper, and against a direct call of the same
// function, in one run:
//
//	cd benchmarks/compare
//	go test -run '^$' -bench . -benchmem -count 10 -cpu 1,2
//
// The overhead of a wrapper is its ns/op minus that of the matching direct
// benchmark (Direct, ParallelDirect, DirectFailure). TimeNow is one call
// of time.Now, which gobreaker makes twice a call and the loop once (with
// a time.Since). The package lives in a module of its own so that the
// selfimprove module itself requires nothing but the standard library. See docs/performance.md for the measured table.
package compare
