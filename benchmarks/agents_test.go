package benchmarks

import (
	"context"
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// discardStore keeps nothing: with it, a test measures the memory the
// Loop itself holds for its agents, and none of a store's.
type discardStore struct{}

func (discardStore) LoadAgent(id string, _ func([]byte) error) error {
	return fmt.Errorf("agent %q: %w", id, fs.ErrNotExist)
}
func (discardStore) SaveAgent(string, []byte) error            { return nil }
func (discardStore) AppendEvents([]si.Event) error             { return nil }
func (discardStore) AppendTraces([]si.Trace) error             { return nil }
func (discardStore) Close() error                              { return nil }
func (discardStore) LoadMeta(string, func([]byte) error) error { return fs.ErrNotExist }
func (discardStore) SaveMeta(string, []byte) error             { return nil }

// manyIDs drives n distinct agent IDs, one successful call each, from
// workers goroutines, against a Loop with the default cap of 10,000
// agents. It returns the peak of live agents, the peak live heap, the mean time
// per call, and how long Close took.
func manyIDs(t testing.TB, n, workers int) (peakAgents int64, peakHeap uint64, perCall, closing time.Duration) {
	l, err := si.New(si.WithStore(discardStore{}), si.WithNotifier(nil), si.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context, si.Config) error { return nil }
	var next, peak atomic.Int64
	// The workers stop while a sample is taken, so that it is the live
	// heap: what a collection leaves, with no call allocating meanwhile.
	var pause sync.RWMutex
	sample := func() {
		pause.Lock()
		defer pause.Unlock()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				pause.RLock()
				l.ExecuteWithImprovement(ctx, fmt.Sprintf("user-%d", i), ok)
				pause.RUnlock()
				if a := l.Metrics().Agents; a > peak.Load() {
					peak.Store(a)
				}
				if i%(int64(n)/50) == 0 {
					sample()
				}
			}
		}()
	}
	wg.Wait()
	perCall = time.Since(start) / time.Duration(n)
	sample()
	start = time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return peak.Load(), peakHeap, perCall, time.Since(start)
}

// TestManyAgentIDs: whatever the rate of new IDs, the agents in memory
// stay at the cap (plus one per worker creating an agent at that moment),
// and so does the heap. Without the race detector it drives 1,000,000 IDs.
func TestManyAgentIDs(t *testing.T) {
	n, workers := 1_000_000, 8
	if raceEnabled || testing.Short() {
		n = 30_000
	}
	const limit = 10_000 // the default WithMaxAgents
	peak, heap, perCall, closing := manyIDs(t, n, workers)
	t.Logf("%d IDs, %d workers: peak %d live agents, peak live heap %.1f MiB, %v a call, Close %v",
		n, workers, peak, float64(heap)/(1<<20), perCall, closing)
	if peak > int64(limit+workers) {
		t.Errorf("peak of %d live agents, want at most %d + %d", peak, limit, workers)
	}
	// About 4 KiB an agent live (its state, counters, config, map entry
	// and ring slot), with room to spare.
	if max := uint64(limit * 6 << 10); heap > max {
		t.Errorf("peak live heap %d MiB, want at most %d MiB", heap>>20, max>>20)
	}
}

// BenchmarkNewAgentOverCap is a call of a new agent ID when the Loop is
// at its cap: it creates the agent and evicts an idle one.
func BenchmarkNewAgentOverCap(b *testing.B) {
	l, err := si.New(si.WithStore(discardStore{}), si.WithNotifier(nil), si.WithLogger(discard), si.WithMaxAgents(1000))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ok := func(context.Context, si.Config) error { return nil }
	for i := range 2000 {
		l.ExecuteWithImprovement(ctx, fmt.Sprintf("warm-%d", i), ok)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		l.ExecuteWithImprovement(ctx, fmt.Sprintf("user-%d", i), ok)
	}
	if a := l.Metrics().Agents; a > 1001 {
		b.Fatalf("%d live agents over a cap of 1,000", a)
	}
}
