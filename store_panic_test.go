package selfimprove_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// panickyStore is a user's Store, a RAMStore whose LoadAgent and
// SaveAgent panic while told to.
type panickyStore struct {
	*si.RAMStore
	load, save atomic.Bool
}

func (s *panickyStore) LoadAgent(id string, decode func([]byte) error) error {
	if s.load.Load() {
		panic("store: load exploded")
	}
	return s.RAMStore.LoadAgent(id, decode)
}

func (s *panickyStore) SaveAgent(id string, b []byte) error {
	if s.save.Load() {
		panic("store: save exploded")
	}
	return s.RAMStore.SaveAgent(id, b)
}

// callNoPanic runs one call of agent id whose fn returns err, and reports
// what the call returned, or the value it panicked with.
func callNoPanic(l *si.Loop, id string, err error) (rep si.Report, pv any, got error) {
	defer func() { pv = recover() }()
	rep, got = l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return err })
	return rep, nil, got
}

// A Store whose LoadAgent panics does not fail the call: fn runs
// untracked, its error comes back unchanged, and the panic is in
// Report.LoopErr.
func TestStoreLoadPanicDoesNotFailTheCall(t *testing.T) {
	st := &panickyStore{RAMStore: si.NewRAMStore()}
	e := newStoreEnv(t, si.WithStore(st))
	st.load.Store(true)
	rep, pv, got := callNoPanic(e.l, "a", errBoom)
	if pv != nil {
		t.Fatalf("the call panicked with the store's panic %v; want fn's error and the panic in Report.LoopErr", pv)
	}
	if got != errBoom {
		t.Errorf("ExecuteWithImprovement returned %v, want fn's error %v unchanged", got, errBoom)
	}
	if !errors.Is(rep.LoopErr, si.ErrStorePanic) {
		t.Errorf("Report.LoopErr is %v; want the store's panic (ErrStorePanic)", rep.LoopErr)
	}
	if m := e.l.Metrics(); m.StoreErrors == 0 {
		t.Error("Metrics.StoreErrors is 0; want the panic counted")
	}
	st.load.Store(false)
	if _, pv, got := callNoPanic(e.l, "a", nil); pv != nil || got != nil {
		t.Errorf("once the store is back, a call returned %v (panic %v); want nil", got, pv)
	}
}

// A Store whose SaveAgent panics when a call's decision is saved does not
// fail the call: fn's error comes back unchanged, the change that could
// not be saved is not made, the panic is in Report.LoopErr, and the loop
// goes on once the store is back.
func TestStoreSavePanicDoesNotFailTheCall(t *testing.T) {
	st := &panickyStore{RAMStore: si.NewRAMStore()}
	strat := &tweakStrategy{tweaks: []si.Config{{Route: "b"}, {Route: "b"}}}
	e := newStoreEnv(t, si.WithStore(st), si.WithStrategy(strat))
	e.call("a", nil, time.Millisecond)
	st.save.Store(true)
	var decided si.Report
	for i := range 20 {
		rep, pv, got := callNoPanic(e.l, "a", errBoom)
		if pv != nil {
			t.Fatalf("call %d panicked with the store's panic %v; want fn's error and the panic in Report.LoopErr", i, pv)
		}
		if got != errBoom {
			t.Fatalf("call %d returned %v, want fn's error %v unchanged", i, got, errBoom)
		}
		if strat.count() > 0 {
			decided = rep
			break
		}
	}
	if strat.count() == 0 {
		t.Fatal("the strategy never ran")
	}
	if !errors.Is(decided.LoopErr, si.ErrStorePanic) {
		t.Errorf("the call whose change could not be saved has Report.LoopErr %v; want the store's panic (ErrStorePanic)", decided.LoopErr)
	}
	if c := e.l.Config("a"); c.Route == "b" {
		t.Errorf("config v%d (route %q) in force, though its save panicked; want the change not made", c.Version, c.Route)
	}
	st.save.Store(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if _, pv, got := callNoPanic(e.l, "a", errBoom); pv != nil || !errors.Is(got, errBoom) {
				t.Errorf("once the store is back, a call returned %v (panic %v)", got, pv)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("calls hang once the store that panicked is back")
	}
}
