package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

// The whole protocol, driven through the public API of three Loops on
// one in-memory fleet by seeded schedules: each step is a call on one
// replica (its outcome scripted by the route it runs), an operator's
// SetConfig, a restart of one replica on its store, a sync of one
// replica, the delivery of the commits announced to one replica (each
// replica's notifications wait until a step delivers them, so that a
// replica acts on an old state as long as a schedule says), the clock
// past the cooldown, and, with faults, a replica's next commit or counts
// dropped or booked with the answer lost. After each step, the failure
// memory of each replica that runs the agent holds the outcome of each
// decided change of a fault it knows. Once every replica is synced: one
// config and one list of changes everywhere; a decision a call reported
// is in force, and each decision is in the fleet's log once; a SetConfig
// that returned nil is in the history, one that lost a conflict is not;
// the fleet pooled every call once. Each schedule runs in a synctest
// bubble with the flushers left to its syncs: a failing schedule prints
// its seed, and SCHEDULE_SEED replays it step for step.

// heldFleet is one replica's way to the fleet: the commits announced to
// it wait until deliver.
type heldFleet struct {
	*fleettest.Fleet
	mu    sync.Mutex
	fn    func(string, uint64)
	held  []heldNote
	fault string // the next commit's: "drop" (not sent), "lose" (landed, answer lost)
	// addFault is the next Add's: "drop" (not booked) or "lose" (booked,
	// answer lost).
	addFault string
}

// take returns the fault *f a step set ("": none), and clears it.
func (h *heldFleet) take(f *string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	fault := *f
	*f = ""
	return fault
}

// Add adds the deltas, with the fault a step set, if any.
func (h *heldFleet) Add(ctx context.Context, d []si.FleetDelta) ([]si.FleetPool, error) {
	switch h.take(&h.addFault) {
	case "drop":
		return nil, fmt.Errorf("%w: the counts were dropped", si.ErrFleetUnavailable)
	case "lose":
		if _, err := h.Fleet.Add(ctx, d); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: the answer to the counts was lost", si.ErrFleetUnavailable)
	}
	return h.Fleet.Add(ctx, d)
}

// Commit commits, with the fault a step set, if any.
func (h *heldFleet) Commit(ctx context.Context, id string, rev uint64, v []byte) (uint64, error) {
	switch h.take(&h.fault) {
	case "drop":
		return 0, fmt.Errorf("%w: the commit was dropped", si.ErrFleetUnavailable)
	case "lose":
		if _, err := h.Fleet.Commit(ctx, id, rev, v); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: the commit's answer was lost", si.ErrFleetUnavailable)
	}
	return h.Fleet.Commit(ctx, id, rev, v)
}

type heldNote struct {
	id  string
	rev uint64
}

func (h *heldFleet) Subscribe(fn func(string, uint64)) func() {
	h.mu.Lock()
	h.fn = fn
	h.mu.Unlock()
	return h.Fleet.Subscribe(func(id string, rev uint64) {
		h.mu.Lock()
		h.held = append(h.held, heldNote{id, rev})
		h.mu.Unlock()
	})
}

// deliver hands the held notifications to the replica, oldest first.
func (h *heldFleet) deliver() {
	h.mu.Lock()
	held, fn := h.held, h.fn
	h.held = nil
	h.mu.Unlock()
	for _, n := range held {
		fn(n.id, n.rev)
	}
}

// routeStrategy proposes a new route each run: r1, r2, ... (never one
// rolled back before).
type routeStrategy struct{ n atomic.Int64 }

func (s *routeStrategy) Analyze(context.Context, si.Analysis) (*si.Tweak, error) {
	return &si.Tweak{Config: si.Config{Route: "r" + strconv.FormatInt(s.n.Add(1), 10)}, Reason: "route around the fault"}, nil
}

// schedule is one seeded run.
type schedule struct {
	t      *testing.T
	seed   uint64
	e      *fleetEnv
	held   []*heldFleet
	stores []*si.RAMStore // each replica's, kept across its restarts
	// idle: the replica has not run the agent since it restarted (its
	// failure memory learns outcomes of the agents it runs).
	idle     [3]bool
	rng      *rand.Rand
	calls    int
	failures int // of the calls
	// faults: steps may drop a replica's next commit, or lose its
	// answer after it landed.
	faults bool
	reps   []si.Report
	ops    []opSet
	log    []string
}

func newSchedule(t *testing.T, seed uint64, faults bool) *schedule {
	s := &schedule{t: t, seed: seed, faults: faults, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	s.e = newFleetEnv(t, 0, &routeStrategy{})
	for range 3 {
		h := &heldFleet{Fleet: s.e.mem}
		s.held = append(s.held, h)
		s.stores = append(s.stores, si.NewRAMStore())
		s.e.opts = []si.Option{si.WithStore(s.stores[len(s.stores)-1])}
		si.TestingManualFlush(s.e.addVia(h))
	}
	s.e.opts = nil
	if err := s.e.reps[0].SetThreshold("a", manual(5)); err != nil {
		t.Fatal(err)
	}
	return s
}

// fails is the script: the first 20 calls work; then the primary fails;
// an odd route helps (fails one call in ten), an even one harms (nine in
// ten), or the other way round for an odd seed.
func (s *schedule) fails(route string) bool {
	if s.calls <= 20 {
		return false
	}
	if route == "" {
		return true
	}
	n, _ := strconv.Atoi(route[1:])
	if (n+int(s.seed))%2 == 1 {
		return s.rng.IntN(10) == 0
	}
	return s.rng.IntN(10) != 0
}

func (s *schedule) step() {
	// Time passes between steps (a replica's clock never stands still:
	// two replicas do not decide at the same nanosecond).
	s.e.clk.Advance(time.Millisecond)
	r := s.rng.IntN(3)
	switch k := s.rng.IntN(100); {
	case k < 55:
		s.calls++
		s.idle[r] = false
		rep, _ := s.e.reps[r].ExecuteWithImprovement(context.Background(), "a", func(_ context.Context, cfg si.Config) error {
			s.e.clk.Advance(10 * time.Millisecond)
			if s.fails(cfg.Route) {
				s.failures++
				return errBoom
			}
			return nil
		})
		s.reps = append(s.reps, rep)
		s.log = append(s.log, fmt.Sprintf("call %d: v%d%s", r, rep.ConfigVersion, reportWords(rep)))
	case k < 75:
		s.e.reps[r].SyncFleet(context.Background())
		s.log = append(s.log, fmt.Sprintf("sync %d", r))
	case k < 95:
		s.held[r].deliver()
		s.log = append(s.log, fmt.Sprintf("deliver %d", r))
	case k < 97 && s.faults:
		f := [...]string{"drop", "lose"}[k%2]
		h := s.held[r]
		h.mu.Lock()
		if s.rng.IntN(2) == 0 {
			h.fault = f
			s.log = append(s.log, fmt.Sprintf("%s %d's next commit", f, r))
		} else {
			h.addFault = f
			s.log = append(s.log, fmt.Sprintf("%s %d's next counts", f, r))
		}
		h.mu.Unlock()
	case k == 97:
		route := "op" + strconv.Itoa(len(s.ops)+1)
		s.idle[r] = false
		err := s.e.reps[r].SetConfig("a", si.Config{Route: route})
		s.ops = append(s.ops, opSet{route, err})
		s.log = append(s.log, fmt.Sprintf("SetConfig %d %s: %v", r, route, err))
	case k == 98:
		s.restart(r)
		s.log = append(s.log, fmt.Sprintf("restart %d", r))
	default:
		s.e.clk.Advance(61 * time.Second)
		s.log = append(s.log, "cooldown over")
	}
}

// restart closes replica r and starts it again on its store. The
// fleet answers its Close: a replica closed while the fleet cannot be
// reached keeps the counts it could not send nowhere.
func (s *schedule) restart(r int) {
	h := s.held[r]
	h.mu.Lock()
	h.fault, h.addFault = "", ""
	h.mu.Unlock()
	s.idle[r] = true
	if err := s.e.reps[r].Close(); err != nil {
		s.t.Fatalf("seed %d: replica %d: Close: %v", s.seed, r, err)
	}
	s.e.opts = []si.Option{si.WithStore(s.stores[r])}
	l := s.e.addVia(s.held[r])
	s.e.opts = nil
	n := len(s.e.reps) - 1
	s.e.reps[r], s.e.recs[r] = l, s.e.recs[n]
	s.e.reps, s.e.recs = s.e.reps[:n], s.e.recs[:n]
	si.TestingManualFlush(l)
}

// opSet is an operator's SetConfig of a schedule, and what it returned.
type opSet struct {
	route string
	err   error
}

// checkOps checks that a SetConfig that returned nil is in the history
// of configs, and one that lost to another replica's decision is not
// (one whose answer was lost may be either).
func (s *schedule) checkOps() error {
	ran := map[string]bool{}
	for _, c := range s.e.reps[0].History("a") {
		ran[c.Route] = true
	}
	for _, op := range s.ops {
		switch {
		case op.err == nil && !ran[op.route]:
			return fmt.Errorf("SetConfig of %s returned nil; the fleet's history has no such config", op.route)
		case errors.Is(op.err, si.ErrFleetConflict) && ran[op.route]:
			return fmt.Errorf("SetConfig of %s failed (%v); the fleet's history has it", op.route, op.err)
		}
	}
	return nil
}

func reportWords(rep si.Report) string {
	w := ""
	if rep.Improvement != nil {
		w += " applied " + rep.Improvement.To.Route
	}
	if rep.Rollback != nil {
		w += " rolled back " + rep.Rollback.To.Route
	}
	if rep.Confirmed != nil {
		w += " confirmed " + rep.Confirmed.To.Route
	}
	if rep.LoopErr != nil {
		w += " (" + rep.LoopErr.Error() + ")"
	}
	return w
}

// settle delivers everything and syncs every replica until they agree,
// without faults.
func (s *schedule) settle() {
	for _, h := range s.held {
		h.mu.Lock()
		h.fault, h.addFault = "", ""
		h.mu.Unlock()
	}
	for range 4 {
		for i, l := range s.e.reps {
			s.e.clk.Advance(time.Millisecond)
			s.held[i].deliver()
			if err := l.SyncFleet(context.Background()); err != nil {
				s.t.Fatalf("seed %d: replica %d: SyncFleet: %v", s.seed, i, err)
			}
		}
	}
}

// check checks the invariants; it returns what does not hold.
func (s *schedule) check() error {
	ref := s.e.reps[0].Changes("a")
	state := map[string]si.ChangeState{}
	for _, ch := range ref {
		state[ch.ID] = ch.State
	}
	for i, l := range s.e.reps {
		if v, v0 := l.Config("a").Version, s.e.reps[0].Config("a").Version; v != v0 {
			return fmt.Errorf("replica %d runs version %d, replica 0 %d", i, v, v0)
		}
		if got := l.Changes("a"); !slices.EqualFunc(got, ref, func(a, b si.Change) bool { return a.ID == b.ID && a.State == b.State }) {
			return fmt.Errorf("replica %d's changes %v, replica 0's %v", i, changeWords(got), changeWords(ref))
		}
	}
	made := map[si.ChangeState]int{}
	for _, rep := range s.reps {
		for _, d := range []struct {
			ch   *si.Change
			want si.ChangeState
		}{{rep.Rollback, si.ChangeRolledBack}, {rep.Confirmed, si.ChangeConfirmed}} {
			if d.ch == nil {
				continue
			}
			made[d.want]++
			if state[d.ch.ID] != d.want {
				return fmt.Errorf("a call reported change %s %s; the fleet has it %q", d.ch.To.Route, d.want, state[d.ch.ID])
			}
		}
		if ch := rep.Improvement; ch != nil {
			if _, ok := state[ch.ID]; !ok {
				return fmt.Errorf("a call reported change %s applied; the fleet has no such change", ch.To.Route)
			}
		}
	}
	// Each decision is in the fleet's log once, and a call reports it
	// at most once (one taken at a flush has no caller).
	evs, err := s.e.mem.Events(context.Background(), 10000)
	if err != nil {
		return err
	}
	logged := map[si.ChangeState]int{}
	for _, ev := range evs {
		want := map[si.EventType]si.ChangeState{si.EventRolledBack: si.ChangeRolledBack, si.EventChangeConfirmed: si.ChangeConfirmed}[ev.Type]
		if want == "" || ev.Change == nil {
			continue
		}
		logged[want]++
		if state[ev.Change.ID] != want {
			return fmt.Errorf("the fleet's log has change %s %s; the fleet has it %q", ev.Change.To.Route, want, state[ev.Change.ID])
		}
	}
	for _, want := range []si.ChangeState{si.ChangeRolledBack, si.ChangeConfirmed} {
		n := 0
		for _, st := range state {
			if st == want {
				n++
			}
		}
		if logged[want] != n || made[want] > n {
			return fmt.Errorf("%d changes %s in the fleet, %d in its log, %d reported so by calls", n, want, logged[want], made[want])
		}
	}
	// The fleet pooled every call once, whatever answers were lost.
	pools, err := s.e.mem.Add(context.Background(), []si.FleetDelta{{AgentID: "a"}})
	if err != nil {
		return err
	}
	if got := pools[0].Total; got.Calls != int64(s.calls) || got.Failures != int64(s.failures) {
		return fmt.Errorf("the fleet pooled %d calls, %d failed; %d were made, %d failed", got.Calls, got.Failures, s.calls, s.failures)
	}
	if err := s.checkOps(); err != nil {
		return err
	}
	return s.checkMemory(ref)
}

// checkMemory checks that each replica whose failure memory knows the
// fault holds the outcome of every decided change made for it, of
// changes (nil: of each replica's own list).
func (s *schedule) checkMemory(changes []si.Change) error {
	own := changes == nil
	for i, l := range s.e.reps {
		if s.idle[i] {
			continue
		}
		if own {
			changes = l.Changes("a")
		}
		ms := l.Similar("boom", 1)
		if len(ms) == 0 {
			continue
		}
		// The memory keeps a fault's latest 8 fixes, whatever became of
		// them (one may be a change under verification): the latest 7
		// changes for the fault are checked, those confirmed or rolled
		// back.
		var latest []si.Change
		for _, ch := range changes {
			if ch.Cluster == ms[0].Cluster {
				latest = append(latest, ch)
			}
		}
		for _, ch := range latest[max(0, len(latest)-7):] {
			if ch.State != si.ChangeRolledBack && ch.State != si.ChangeConfirmed {
				continue
			}
			j := slices.IndexFunc(ms[0].Fixes, func(f si.Fix) bool { return f.ChangeID == ch.ID })
			switch {
			case j < 0:
				return fmt.Errorf("replica %d's memory of the fault has no fix for change %s (%s)", i, ch.To.Route, ch.State)
			case string(ms[0].Fixes[j].State) != string(ch.State):
				return fmt.Errorf("replica %d's memory has change %s %s, the fleet %s", i, ch.To.Route, ms[0].Fixes[j].State, ch.State)
			}
		}
	}
	return nil
}

func changeWords(chs []si.Change) []string {
	var out []string
	for _, ch := range chs {
		out = append(out, ch.To.Route+":"+string(ch.State))
	}
	return out
}

// TestFleetSchedules runs seeded schedules (200 calm ones and 200 with
// faults, 50 each under -race or -short; SCHEDULES=n for more,
// SCHEDULE_SEED=s for one) and checks the invariants after each.
func TestFleetSchedules(t *testing.T) {
	n, first := 200, uint64(1)
	if testing.Short() || si.TestingRace {
		n = 50 // under the race detector: 30 s for 200 of each
	}
	if v, err := strconv.Atoi(os.Getenv("SCHEDULES")); err == nil {
		n = v
	}
	if v, err := strconv.ParseUint(os.Getenv("SCHEDULE_SEED"), 10, 64); err == nil {
		first, n = v, 1
	}
	for _, faults := range []bool{false, true} {
		t.Run(map[bool]string{false: "calm", true: "faults"}[faults], func(t *testing.T) {
			st := scheduleStats{digest: fnv.New64a()}
			failed := 0
			for seed := first; seed < first+uint64(n); seed++ {
				ok := t.Run("", func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { runSchedule(t, seed, faults, &st) })
				})
				if !ok {
					failed++
				}
				if failed >= 3 {
					break
				}
			}
			t.Logf("%d schedules of 400 steps, %d failed: %d decisions; %d SetConfigs, %d of them failed; log digest %016x",
				n, failed, st.decided, st.ops, st.opsFailed, st.digest.Sum64())
		})
	}
}

// scheduleStats is what the schedules did.
type scheduleStats struct {
	decided, ops, opsFailed int
	digest                  hash.Hash64 // of every step's log line: the same for the same seeds
}

// runSchedule runs the schedule of seed, and adds what it did to st. After each step, synctest.Wait lets a flush that a step
// asked for (a kick) end before the next step.
func runSchedule(t *testing.T, seed uint64, faults bool, st *scheduleStats) {
	s := newSchedule(t, seed, faults)
	for range 400 {
		s.step()
		synctest.Wait()
		if err := s.checkMemory(nil); err != nil {
			for _, line := range s.log[max(0, len(s.log)-60):] {
				t.Log(line)
			}
			t.Fatalf("seed %d (SCHEDULE_SEED=%d replays it), step %d: %v", seed, seed, len(s.log), err)
		}
	}
	s.settle()
	synctest.Wait()
	for _, ch := range s.e.reps[0].Changes("a") {
		if ch.State != si.ChangeVerifying {
			st.decided++
		}
	}
	for _, line := range s.log {
		st.digest.Write([]byte(line + "\n"))
	}
	st.ops += len(s.ops)
	for _, op := range s.ops {
		if op.err != nil {
			st.opsFailed++
		}
	}
	if err := s.check(); err != nil {
		for _, line := range s.log[max(0, len(s.log)-60):] {
			t.Log(line)
		}
		t.Fatalf("seed %d (SCHEDULE_SEED=%d replays it): %v", seed, seed, err)
	}
}
