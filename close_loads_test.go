package selfimprove_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// readGateStore is a user's Store whose LoadAgent waits for its gate to
// open (a network store, slow or hung), counting the reads it serves.
type readGateStore struct {
	*si.RAMStore
	gate  chan struct{}
	loads atomic.Int64
}

func (s *readGateStore) LoadAgent(id string, decode func([]byte) error) error {
	<-s.gate
	s.loads.Add(1)
	return s.RAMStore.LoadAgent(id, decode)
}

// Close, begun while a burst of new agents waits on a slow store, waits
// for the reads under way, not for every load queued behind them: those
// are dropped, without reading the store. Before, Close waited for all
// of them, one read after another (a burst of 320 new agents on a store
// taking 0.2 s a read held Close 2.6 s), and the store was
// read for each after Close had begun.
func TestCloseDoesNotWaitForQueuedLoads(t *testing.T) {
	const agents = 320 // ten for each of the loads that may run at once (32)
	st := &readGateStore{RAMStore: si.NewRAMStore(), gate: make(chan struct{})}
	l, err := si.New(si.WithStore(st), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() { timedCall(l, fmt.Sprint("burst-", i)) }) // each held a second at most
	}
	wg.Wait()
	closed := make(chan error)
	go func() { closed <- l.Close() }()
	for { // until Close has begun: a call then runs untracked with ErrClosed
		if rep, _ := timedCall(l, "probe"); errors.Is(rep.LoopErr, si.ErrClosed) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(st.gate) // the store answers
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := st.loads.Load(); n > 32 {
		t.Errorf("the store was read for %d agents during Close; want at most the 32 reads under way when it began, not the %d queued behind them", n, agents)
	}
}
