package replica

import (
	"fmt"
	"slices"
	"strings"
)

// The protocol simulator: replicas that each hold one agent's copy (a set
// of decision IDs) and its State, a fleet that is a compare-and-set
// register with notifications, and a network of messages in flight. A
// run is a sequence of choices among the enabled steps (a decision, a
// save, a poll, delivering or losing a message, a fault); explore walks
// every sequence of a script exhaustively (or a seeded sample of them),
// and each run ends with a fault-free sync and the invariants' check.
//
// The harness plays the Loop's driver (fleet_commit.go, persist.go): it
// calls State's methods as the driver does, under the one lock a replica
// has, and carries out what they return; a save holds the replica's save
// lock from Begin to its last take-back.

const invalidState = "garbage" // a state no replica can decode

// script bounds one exploration.
type script struct {
	replicas  int
	decisions []int // decisions each replica makes
	claims    []int // probe claims each replica makes (a commit sent even when unchanged)
	polls     int   // flusher refreshes, in all
	loseAns   int   // commit answers lost after the commit landed
	dropReq   int   // commits that never reach the fleet (unreachable)
	refuse    int   // commits the fleet refuses
	corrupt   int   // invalid states written by a third party, that do not decode
	badKey    int   // invalid states the fleet finds itself (redisfleet: a load answers revision 0 and an error)
	loseState int   // the fleet loses the state (a Redis restarted without persistence)
	down      int   // commits not sent: the replica is backing off
	failLoad  int   // loads that get no answer

	// The undone fixes, to show that the simulator finds each race.
	staleRev    bool // a save commits at the revision its replica is at when it sends, not the one its snapshot was taken at
	claimNoLock bool // a probe claim commits without the save lock
	noGhostFix  bool // a failed commit is not taken back while a rewrite is due
}

type msgKind uint8

const (
	mCommit    msgKind = iota // replica → fleet
	mCommitAns                // fleet → replica
	mLoad                     // replica → fleet
	mLoadAns                  // fleet → replica
	mNotify                   // fleet → replica
)

type msg struct {
	kind  msgKind
	r     int // the replica
	proc  *proc
	rev   uint64
	val   string
	out   Outcome
	res   Load
	owner *proc  // a load's waiting save (nil: the flusher's or a notification's)
	since uint64 // a load's: the copy's revision when it was sent
}

func (m *msg) String() string {
	switch m.kind {
	case mCommit:
		return fmt.Sprintf("commit r%d at %d of %s", m.r, m.rev, m.val)
	case mCommitAns:
		return fmt.Sprintf("commit's answer to r%d: %v at %d", m.r, m.out, m.rev)
	case mLoad:
		return fmt.Sprintf("load r%d (at %d)", m.r, m.since)
	case mLoadAns:
		return fmt.Sprintf("load's answer to r%d: %d %s (%d)", m.r, m.rev, m.val, m.res)
	}
	return fmt.Sprintf("notify r%d of %d", m.r, m.rev)
}

// batch is the decisions made on a copy since a save last took it.
type batch struct {
	ids    []string
	failed bool
}

// proc is a save (or a probe claim) in progress: it holds its replica's
// save lock.
type proc struct {
	r       int
	c       Commit
	taken   *batch
	out     Outcome
	err     bool
	refresh bool // waits for its refresh's answer
	claim   bool
	keep    []string // the decisions whose events wait with the commit if its answer is lost
	then    func(asked bool)
	down    bool
	sent    bool
	done    bool
}

type replicaSim struct {
	st       State
	copy     []string // the decisions in force on this replica, sorted
	decided  *batch
	locked   *proc // the save lock's holder
	decisons int
	claims   int
	polling  bool     // a flusher refresh in flight
	inflight int      // commits sent and not finished
	sending  []*proc  // saves begun, not sent yet
	later    []func() // states to take, each under a lock of its own (carry)
}

// takeLater runs replica i's k-th state to take.
func (s *sim) takeLater(i, k int) {
	r := s.rs[i]
	f := r.later[k]
	r.later = slices.Delete(r.later, k, k+1)
	f()
}

type sim struct {
	sc script
	rs []*replicaSim
	f  struct {
		rev     uint64
		val     string
		invalid bool
		bad     bool // invalid, and the fleet says so (badKey)
	}
	maxRev   uint64 // the highest revision the fleet gave
	net      []*msg
	budget   script // what is left of sc's faults
	made     map[string]bool
	failed   map[string]bool
	recorded map[string]bool // reported failed, then recorded when it was seen to have landed
	// landedOnce: decisions the fleet's state held at some time;
	// failedLanded: those reported failed after they had landed (their
	// answers lost).
	landedOnce, failedLanded map[string]bool
	err                      error
}

func encode(ids []string) string { return "[" + strings.Join(ids, ",") + "]" }

func decode(v string) ([]string, bool) {
	if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
		return nil, false
	}
	v = v[1 : len(v)-1]
	if v == "" {
		return nil, true
	}
	return strings.Split(v, ","), true
}

func newSim(sc script) *sim {
	s := &sim{sc: sc, budget: sc, made: map[string]bool{}, failed: map[string]bool{}, recorded: map[string]bool{}, landedOnce: map[string]bool{}, failedLanded: map[string]bool{}}
	for range sc.replicas {
		r := &replicaSim{}
		r.st.Took([]byte(encode(nil)))
		s.rs = append(s.rs, r)
	}
	return s
}

func (s *sim) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
	}
}

// step is one enabled step of a run.
type step struct {
	name string
	do   func()
}

// enabled lists the steps enabled now, in a fixed order.
func (s *sim) enabled() []step {
	var out []step
	for i, r := range s.rs {
		if r.decisons < s.sc.decisions[i] {
			out = append(out, step{fmt.Sprintf("decide r%d", i), func() { s.decide(i) }})
		}
		if r.locked == nil && (r.decided != nil || r.st.Rewrite()) {
			out = append(out, step{fmt.Sprintf("save r%d", i), func() { s.save(i, false, false) }})
			if s.budget.down > 0 {
				out = append(out, step{fmt.Sprintf("save r%d backing off", i), func() { s.budget.down--; s.save(i, false, true) }})
			}
		}
		if len(s.sc.claims) > i && r.claims < s.sc.claims[i] && (r.locked == nil || s.sc.claimNoLock) {
			out = append(out, step{fmt.Sprintf("claim r%d", i), func() { s.save(i, true, false) }})
		}
		for _, p := range r.sending {
			out = append(out, step{fmt.Sprintf("send r%d", i), func() { s.send(p) }})
		}
		for k := range r.later {
			out = append(out, step{fmt.Sprintf("take a state r%d", i), func() { s.takeLater(i, k) }})
		}
		if s.budget.polls > 0 && !r.polling {
			out = append(out, step{fmt.Sprintf("poll r%d", i), func() { s.budget.polls--; s.poll(i) }})
		}
	}
	if s.budget.corrupt > 0 {
		out = append(out, step{"corrupt", func() { s.budget.corrupt--; s.corruptFleet(false) }})
	}
	if s.budget.badKey > 0 {
		out = append(out, step{"corrupt (a bad key)", func() { s.budget.badKey--; s.corruptFleet(true) }})
	}
	if s.budget.loseState > 0 && s.f.rev > 0 {
		out = append(out, step{"lose state", func() { s.budget.loseState--; s.f.rev, s.f.val, s.f.invalid, s.f.bad = 0, "", false, false }})
	}
	for k, m := range s.net {
		out = append(out, step{"deliver " + m.String(), func() { s.deliver(k, false) }})
		if s.faulty(m) {
			out = append(out, step{"fault " + m.String(), func() { s.deliver(k, true) }})
		}
	}
	return out
}

// faulty reports whether m may meet a fault the budget allows.
func (s *sim) faulty(m *msg) bool {
	switch m.kind {
	case mCommit:
		return s.budget.dropReq > 0 || s.budget.refuse > 0
	case mCommitAns:
		return s.budget.loseAns > 0 && m.out == Landed
	case mLoad:
		return s.budget.failLoad > 0
	}
	return false
}

func (s *sim) decide(i int) {
	r := s.rs[i]
	r.decisons++
	r.make(fmt.Sprintf("r%dd%d", i, r.decisons))
}

// make makes the decision id on r's copy, in the batch no save took yet.
func (r *replicaSim) make(id string) {
	r.copy = append(r.copy, id)
	slices.Sort(r.copy)
	if r.decided == nil {
		r.decided = &batch{}
	}
	r.decided.ids = append(r.decided.ids, id)
}

// save is the driver's save (persist.go) or probe claim (fleetClaim):
// under the lock, take the batch and Begin; then commit.
func (s *sim) save(i int, claim, down bool) {
	r := s.rs[i]
	p := &proc{r: i, claim: claim}
	if r.locked == nil {
		r.locked = p
	}
	if claim {
		// fleetClaim: the claim is a save whose decision, the next
		// probe's time, is made under the lock its state is taken under;
		// it takes the decisions made on the copy and not saved yet with
		// it, as any save.
		r.claims++
		r.make(fmt.Sprintf("r%dc%d", i, r.claims))
	}
	p.taken, r.decided = r.decided, nil
	if p.taken != nil {
		p.keep = p.taken.ids
	}
	p.c = r.st.Begin()
	if claim {
		p.c.Claim()
	}
	p.c.Value = []byte(encode(r.copy))
	p.down = down
	// The driver encodes and sends after unlocking: a refresh may take a
	// newer state in between (send, a step of its own).
	r.sending = append(r.sending, p)
}

// send is the rest of the save p: after the unlocked encoding, the commit
// goes out.
func (s *sim) send(p *proc) {
	r := s.rs[p.r]
	i := p.r
	r.sending = slices.DeleteFunc(r.sending, func(q *proc) bool { return q == p })
	if !p.c.Changed() {
		s.finish(p)
		return
	}
	if p.down {
		p.err = true
		s.outcome(p, NotSent, 0)
		return
	}
	if r.inflight > 0 {
		s.fail("r%d sends a commit while another of its commits is in flight: it may lose to it, reported as another replica's decision", i)
	}
	r.inflight++
	p.sent = true
	r.st.Sending()
	rev := p.c.Rev
	if s.sc.staleRev {
		rev = r.st.Rev
	}
	s.net = append(s.net, &msg{kind: mCommit, r: i, proc: p, rev: rev, val: string(p.c.Value)})
}

func (s *sim) poll(i int) {
	s.rs[i].polling = true
	s.net = append(s.net, &msg{kind: mLoad, r: i, since: s.rs[i].st.Rev})
}

// corruptFleet writes an invalid state at a new revision. bad: one the
// fleet finds invalid itself (redisfleet: a load answers LoadBad at
// revision 0, and a commit at 0 sets it aside); else one only the
// replicas find invalid (it does not decode), at its revision.
func (s *sim) corruptFleet(bad bool) {
	s.maxRev++
	s.f.rev = s.maxRev
	s.f.val, s.f.invalid, s.f.bad = invalidState, true, bad
}

// deliver delivers the message k, or makes it meet a fault.
func (s *sim) deliver(k int, fault bool) {
	m := s.net[k]
	s.net = slices.Delete(s.net, k, k+1)
	switch m.kind {
	case mCommit:
		s.fleetCommit(m, fault)
	case mCommitAns:
		out := m.out
		if fault {
			s.budget.loseAns--
			out = Unreachable
		}
		p := m.proc
		p.err = out != Landed
		s.outcome(p, out, m.rev)
	case mLoad:
		ans := &msg{kind: mLoadAns, r: m.r, owner: m.owner, since: m.since, rev: s.f.rev, val: s.f.val}
		if s.f.invalid && s.f.bad {
			ans.res, ans.rev, ans.val = LoadBad, 0, ""
		}
		if fault {
			s.budget.failLoad--
			ans.res, ans.rev, ans.val = LoadDown, 0, ""
		}
		s.net = append(s.net, ans)
	case mLoadAns:
		s.loaded(m)
	case mNotify:
		r := s.rs[m.r]
		if r.st.Notified(m.rev) && !r.polling {
			r.polling = true
			s.net = append(s.net, &msg{kind: mLoad, r: m.r, since: r.st.Rev})
		}
	}
}

// fleetCommit is the fleet's compare-and-set.
func (s *sim) fleetCommit(m *msg, fault bool) {
	p := m.proc
	ans := &msg{kind: mCommitAns, r: m.r, proc: p}
	switch {
	case fault && s.budget.dropReq > 0:
		s.budget.dropReq--
		ans.out = Unreachable
	case fault:
		s.budget.refuse--
		ans.out = Refused
	case m.rev != s.f.rev && !(m.rev == 0 && s.f.bad):
		ans.out = Conflict
	default:
		// A revision is above any older one, also after the state was
		// lost (redisfleet: the server's time in µs).
		s.maxRev++
		s.f.rev = s.maxRev
		s.f.val, s.f.invalid, s.f.bad = m.val, false, false
		ids, _ := decode(m.val)
		for _, id := range ids {
			s.landedOnce[id] = true
		}
		ans.out, ans.rev = Landed, s.f.rev
		for j := range s.rs {
			s.net = append(s.net, &msg{kind: mNotify, r: j, rev: s.f.rev})
		}
	}
	s.net = append(s.net, ans)
}

// outcome is the root's fleetCommitted input (fleet_commit.go): Committed and its check under one lock, then
// what it asks, each a step of its own as the driver's locks allow.
func (s *sim) outcome(p *proc, out Outcome, nrev uint64) {
	r := s.rs[p.r]
	var keep any
	if out == Unreachable && len(p.keep) > 0 {
		keep = slices.Clone(p.keep)
	}
	p.out = out
	n := r.st.Committed(p.c, out, nrev, keep)
	s.carry(p.r, n, p, func(asked bool) { s.resolve(p, asked) })
}

// carry is the root's fleetLink.carry and next: the check under the input's lock; a state to take
// later, under a lock of its own (a step: the driver decodes it
// unlocked); then a refresh, whose answer p (nil: none) waits for; then
// then, with whether the refresh was answered.
func (s *sim) carry(i int, n Next, p *proc, then func(asked bool)) {
	r := s.rs[i]
	if n.Check {
		r.st.Settle(func(o *Orphan) bool { return s.landed(i, o, string(r.st.Base), nil) })
	}
	rest := func() {
		if n.Refresh && p != nil {
			p.refresh, p.then = true, then
			s.net = append(s.net, &msg{kind: mLoad, r: i, owner: p, since: r.st.Rev})
			return
		}
		then(false)
	}
	if n.Adopt == nil {
		rest()
		return
	}
	ad := *n.Adopt
	r.later = append(r.later, func() {
		if !(s.sc.noGhostFix && ad.Force && r.st.Rewrite()) {
			s.adopt(i, ad)
		}
		rest()
	})
}

// resolve ends p after its refresh (asked: the refresh got an answer).
func (s *sim) resolve(p *proc, asked bool) {
	if p.out == Conflict {
		n := s.rs[p.r].st.Resolved(p.c, asked)
		s.carry(p.r, n, nil, func(bool) { s.finish(p) })
		return
	}
	s.finish(p)
}

func (s *sim) finish(p *proc) {
	r := s.rs[p.r]
	p.done = true
	if p.sent {
		r.inflight--
	}
	if r.locked == p {
		r.locked = nil
	}
	if p.taken == nil {
		return
	}
	if p.err {
		p.taken.failed = true
	}
	for _, id := range p.taken.ids {
		if p.taken.failed {
			s.failed[id] = true
			s.failedLanded[id] = s.landedOnce[id]
		} else {
			s.made[id] = true
		}
	}
}

func (s *sim) loaded(m *msg) {
	r := s.rs[m.r]
	n, asked := r.st.Loaded(m.since, m.rev, []byte(m.val), m.res)
	s.carry(m.r, n, nil, func(bool) {
		if o := m.owner; o != nil {
			o.refresh = false
			o.then(asked)
		} else {
			r.polling = false
		}
	})
}

// adopt is the root's fleetAdopt input (fleetLink.adopt, agent.adoptLocked).
func (s *sim) adopt(i int, ad Adopt) {
	r := s.rs[i]
	ids, valid := decode(string(ad.Value))
	take, _ := r.st.Take(ad, valid)
	if !take {
		return
	}
	known := map[string]bool{}
	for _, id := range r.copy {
		known[id] = true
	}
	if r.decided != nil {
		r.decided.failed = true
		r.decided = nil
	}
	r.copy = slices.Clone(ids)
	for _, o := range r.st.Took([]byte(encode(r.copy))) {
		s.landed(i, &o, string(ad.Value), known)
	}
}

// landed is the driver's check of the orphan o against val, a state of
// the fleet's replica i took (landedLocked): val is the state o tried to
// commit, or it holds a decision of o's the copy did not hold before
// (known). It records o's decisions when they landed.
func (s *sim) landed(i int, o *Orphan, val string, known map[string]bool) bool {
	evs := o.Payload.([]string)
	landed := val == string(o.Value)
	in, _ := decode(val) // the state taken: the driver's check decodes it too
	for _, id := range evs {
		if !known[id] && slices.Contains(in, id) {
			landed = true
		}
	}
	if landed {
		for _, id := range evs {
			s.recorded[id] = true
		}
	}
	return landed
}
