package selfimprove_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// hungStore is a user's Store, a RAMStore whose LoadAgent and SaveAgent
// hang, while their gate is set, until it is closed: a network store, or
// a FileStore on an NFS mount that stopped answering.
type hungStore struct {
	*si.RAMStore
	mu           sync.Mutex
	loadGate     chan struct{}
	saveGate     chan struct{}
	loads, saves atomic.Int64
}

func (s *hungStore) gate(g *chan struct{}) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *g
}

func (s *hungStore) hang(g *chan struct{}) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{})
	*g = c
	return func() {
		s.mu.Lock()
		*g = nil
		s.mu.Unlock()
		close(c)
	}
}

func (s *hungStore) LoadAgent(id string, decode func([]byte) error) error {
	s.loads.Add(1)
	if g := s.gate(&s.loadGate); g != nil {
		<-g
	}
	return s.RAMStore.LoadAgent(id, decode)
}

func (s *hungStore) SaveAgent(id string, b []byte) error {
	s.saves.Add(1)
	if g := s.gate(&s.saveGate); g != nil {
		<-g
	}
	return s.RAMStore.SaveAgent(id, b)
}

// storeHangs is how long the store hangs in these tests: minutes, as a
// hung NFS mount does.
const storeHangs = 5 * time.Minute

// timedCall runs one successful call of agent id and reports how long it
// held its caller.
func timedCall(l *si.Loop, id string) (si.Report, time.Duration) {
	start := time.Now()
	rep, _ := l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return nil })
	return rep, time.Since(start)
}

// An agent's first call, which decides nothing, is not held by a store
// whose LoadAgent hangs: it waits at most a second, then fn runs
// untracked with ErrStoreSlow in Report.LoopErr; the load finishes in the
// background, once, and the next calls find the agent.
func TestFirstCallIsNotHeldByAHungStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &hungStore{RAMStore: si.NewRAMStore()}
		l, err := si.New(si.WithStore(st), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		release := st.hang(&st.loadGate)
		go func() { time.Sleep(storeHangs); release() }()
		reps, held := make([]si.Report, 3), make([]time.Duration, 3)
		reps[0], held[0] = timedCall(l, "a")
		var wg sync.WaitGroup
		for i := 1; i < len(reps); i++ { // while the load hangs, concurrent calls: no second load
			wg.Go(func() { reps[i], held[i] = timedCall(l, "a") })
		}
		wg.Wait()
		for i := range reps {
			if held[i] > time.Second || !reps[i].Success || !errors.Is(reps[i].LoopErr, si.ErrStoreSlow) {
				t.Errorf("call %d: held %v by a LoadAgent that hangs %v; LoopErr %v, success %v; want at most 1s, fn run, ErrStoreSlow",
					i, held[i], storeHangs, reps[i].LoopErr, reps[i].Success)
			}
		}
		if n := l.Metrics().StoreErrors; n != int64(len(reps)) {
			t.Errorf("Metrics.StoreErrors %d; want the %d calls that gave up on the store counted", n, len(reps))
		}
		time.Sleep(storeHangs)
		synctest.Wait()
		rep, d := timedCall(l, "a")
		if d != 0 || rep.LoopErr != nil || rep.ConfigVersion != 1 {
			t.Errorf("after the store answered, a call took %v with LoopErr %v (version %d); want the agent loaded in the background", d, rep.LoopErr, rep.ConfigVersion)
		}
		if n, m, calls := st.loads.Load(), l.Metrics(), l.Stats("a").Calls; n != 1 || m.Agents != 1 || calls != 1 {
			t.Errorf("LoadAgent called %d times, %d agents, %d calls tracked; want one load, one agent, the one call after it", n, m.Agents, calls)
		}
	})
}

// A call that brings a new agent over WithMaxAgents is not held by the
// save of the agent it evicts when SaveAgent hangs: it waits at most a
// second. The evicted agent is saved once the store answers, and it is
// not reloaded before that save lands.
func TestCallOverMaxAgentsIsNotHeldByAHungEvictionSave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, l := evictingLoop(t)
		rep, held := timedCall(l, "b")
		if held > time.Second || !rep.Success || rep.LoopErr != nil {
			t.Errorf("call of b held %v by the save of evicted a that hangs %v (LoopErr %v); want at most 1s", held, storeHangs, rep.LoopErr)
		}
		time.Sleep(storeHangs)
		synctest.Wait()
		if m := l.Metrics(); m.Evictions != 1 || m.Agents != 1 || m.Loads != 0 {
			t.Errorf("metrics %+v; want a evicted once the store answered, and no agent reloaded", m)
		}
		if err := st.RAMStore.LoadAgent("a", func([]byte) error { return nil }); err != nil {
			t.Errorf("a's state is not in the store after its eviction: %v", err)
		}
	})
}

// A call of an agent whose eviction is being saved waits for that save
// (the agent is loaded again only once its state has landed), blocked,
// not spinning: before, it looked the agent up again and again for as
// long as the save hung, a core burned per waiting call, and under
// synctest the bubble's clock never moved (the watchdog below fired).
func TestCallOfAnAgentBeingEvictedWaitsWithoutSpinning(t *testing.T) {
	watchdog := time.AfterFunc(2*time.Minute, func() {
		panic("TestCallOfAnAgentBeingEvictedWaitsWithoutSpinning: the call of the agent being evicted never blocked (it spins)")
	})
	defer watchdog.Stop()
	synctest.Test(t, func(t *testing.T) {
		_, l := evictingLoop(t)
		timedCall(l, "b") // evicts a, whose save hangs
		rep, held := timedCall(l, "a")
		if held > storeHangs || !rep.Success || rep.LoopErr != nil {
			t.Errorf("call of a held %v (LoopErr %v) while its eviction's save hung %v; want it to wait for the save, and run tracked", held, rep.LoopErr, storeHangs)
		}
		if n := l.Stats("a").Calls; n != 2 {
			t.Errorf("a has %d calls; want 2: the state its eviction saved, loaded again, and this call", n)
		}
	})
}

// evictingLoop returns a Loop that keeps one agent in memory, on a store
// st whose saves hang for storeHangs from now, after one call of agent
// "a": the next call of another agent evicts a, and a's save hangs.
// Call it inside a synctest bubble; the Loop is closed when t ends.
func evictingLoop(t *testing.T) (*hungStore, *si.Loop) {
	st := &hungStore{RAMStore: si.NewRAMStore()}
	l, err := si.New(si.WithStore(st), si.WithLogger(quiet), si.WithNotifier(nil), si.WithFlushInterval(0), si.WithMaxAgents(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	timedCall(l, "a")
	release := st.hang(&st.saveGate)
	go func() { time.Sleep(storeHangs); release() }()
	return st, l
}
