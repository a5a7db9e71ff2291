package replica

import (
	"bytes"
	"slices"
)

// State is one agent's replication on one replica: the fleet revision its
// copy is at and the shared state of that revision, the commit in flight,
// the newest revision announced, what is owed to the fleet (a resync, a
// rewrite), and the decisions whose commits' answers were lost (Orphan).
//
// It is a pure state machine: its methods do no IO, read no clock, start
// no goroutine and take no lock. The driver holds the agent's lock around
// each, and carries out what it returns after unlocking, in the order the
// method's doc gives; what that IO answers goes back in as the next input
// (Committed, Loaded, Take). The driver serialises an agent's commits
// (its SaveLock): at most one is in flight.
//
// The protocol, in short (docs/fleet.md, "Faults"):
//   - A commit is a compare-and-set at the revision its state was taken
//     at (Begin, under the same lock as the snapshot), never at one taken
//     from the fleet since: that would write a state made on an older
//     one over a newer (a lost update).
//   - A commit that did not land takes the copy back to the state it was
//     made on, at the copy's revision when the take-back is taken (past
//     the commit's when the fleet lost the state or holds an invalid one,
//     and a rewrite is due), so that the decision is in force nowhere (no
//     ghost decision).
//   - A take-back never undoes a state of the fleet's taken since its
//     commit began: that state took the decisions back.
//   - A claim of a probe is a commit like any other (Commit.Claim): one
//     of an agent is in flight at a time, so a claim never loses to the
//     replica's own save.
//   - A commit whose answer was lost may have landed: the decision is
//     kept (Orphan, up to MaxOrphans) until a state of the fleet's past
//     its revision is taken, and recorded then if that state holds it.
type State struct {
	// Rev is the revision the copy's shared state is at (0: none known).
	Rev uint64
	// Base is the shared state at Rev, as the driver encodes it.
	Base []byte

	rewrite    bool     // the fleet lost the state, or holds an invalid one: write the copy over it
	resync     bool     // compare the copy with the fleet's state at the next flush
	notified   uint64   // the newest revision a notification announced
	committing bool     // a commit is in flight
	takingBack bool     // the state Take took last is a take-back (Adopt.Force)
	taken      uint64   // how many states Take took: a commit's revision alone may come back (a lost state)
	orphans    []Orphan // oldest first, at most MaxOrphans
}

// MaxOrphans bounds the decisions a State keeps whose commits' answers
// were lost; past it the oldest goes unchecked: if it had landed, it is
// in force without its events recorded (after that many lost answers
// with no state of the fleet's taken in between).
const MaxOrphans = 8

// Commit is one commit of the copy's shared state: the state it writes
// (Value), and the revision and base of the copy it was taken from.
type Commit struct {
	Rev   uint64
	Base  []byte
	Value []byte
	// rewrite: the fleet lost the state, or holds an invalid one, when
	// it was taken: it is sent even when it did not change.
	rewrite bool
	claim   bool
	taken   uint64 // State.taken when it was taken
}

// Changed reports whether c is to be sent: its state differs from its
// base, the fleet is to be written over, or c is a claim (Claim).
func (c *Commit) Changed() bool { return c.claim || c.rewrite || !bytes.Equal(c.Value, c.Base) }

// Claim marks c as a claim (of a probe): sent even when its state did not
// change, since its compare-and-set is the claim.
func (c *Commit) Claim() { c.claim = true }

// Orphan is a decision whose commit failed without an answer (a timeout,
// a connection cut): it may still have landed.
type Orphan struct {
	Rev   uint64 // the revision the commit was made at
	Value []byte
	// Payload is the driver's: the decision's events, say.
	Payload any
}

// Outcome is the fleet's answer to a commit.
type Outcome uint8

func (o Outcome) String() string {
	return [...]string{"landed", "conflict", "unreachable", "refused", "not sent"}[o]
}

// The outcomes of a commit.
const (
	// Landed: the fleet took it, at a new revision.
	Landed Outcome = iota
	// Conflict: another replica committed first.
	Conflict
	// Unreachable: no answer; it may have landed.
	Unreachable
	// Refused: the fleet answered with an error that is no outage; it
	// did not land.
	Refused
	// NotSent: backing off, or the chain's time was spent; it cannot
	// land.
	NotSent
)

// Adopt is a shared state to take into the copy: the fleet's at Rev, or,
// with Force, a take-back to the state a failed commit was made on.
type Adopt struct {
	Rev   uint64
	Value []byte
	Force bool
	taken uint64 // a take-back's: State.taken when its commit began
}

// Next is what the driver does after an input, in this order: check
// whether the state last taken (Base) holds the orphan decisions (Check:
// Settle, under the same lock as the input), take
// Adopt's state (Take), load the fleet's state (Refresh, and give the
// answer to Loaded), ask the flusher for a flush (Kick).
type Next struct {
	Check   bool
	Adopt   *Adopt
	Refresh bool
	Kick    bool
	// Lost: the fleet lost the state (a Redis restarted without
	// persistence); the copy will be written again. Log it.
	Lost bool
}

// Begin starts a commit of the copy's shared state, taken under the same
// lock: at the copy's revision and base now. The driver sets its Value
// (the state's encoding) before it is sent.
func (s *State) Begin() Commit {
	return Commit{Rev: s.Rev, Base: s.Base, rewrite: s.rewrite, taken: s.taken}
}

// Sending notes that c goes to the fleet now: a notification of a newer
// revision waits for its answer (Committed).
func (s *State) Sending() { s.committing = true }

// Committed takes the fleet's answer out to commit c: at nrev when it
// Landed. keep is the driver's payload of a commit that may have landed
// (Unreachable; nil: nothing to record later).
//
// Landed: the copy moves to nrev, unless a state was taken meanwhile;
// a notification of a newer revision asks for a Refresh. Conflict: a
// Refresh, then Resolved with whether it could ask. Unreachable, Refused,
// NotSent: the decisions are taken back (Adopt, forced).
func (s *State) Committed(c Commit, out Outcome, nrev uint64, keep any) Next {
	s.committing = false
	switch out {
	case Landed:
		switch {
		case s.Rev == c.Rev && s.taken == c.taken:
			s.Rev, s.Base = nrev, c.Value
			s.rewrite = false // written over the fleet's
		case s.Rev < nrev:
			// The copy took another state while the commit was in
			// flight, and is not at the commit's revision or went back
			// to it (the fleet lost the state meanwhile): it takes the
			// fleet's, which the commit made.
			return Next{Refresh: true}
		}
		return Next{Refresh: s.notified > nrev}
	case Conflict:
		return Next{Refresh: true}
	case Unreachable:
		if keep != nil {
			if len(s.orphans) == MaxOrphans {
				s.orphans = slices.Delete(s.orphans, 0, 1)
			}
			s.orphans = append(s.orphans, Orphan{Rev: c.Rev, Value: c.Value, Payload: keep})
			if s.taken != c.taken {
				// A state of the fleet's was taken while the commit was
				// in flight (a flush's refresh): it may be the commit's
				// own and hold the decision, and no later state would
				// show it as new. The driver checks the state taken,
				// Base, under this same lock (Settle), before anything
				// else can take another.
				return Next{Check: true, Adopt: s.takeBack(c)}
			}
		}
	}
	return Next{Adopt: s.takeBack(c)}
}

// Resolved ends a Conflict, after its Refresh: asked reports that the
// fleet answered it. When the copy took the winner's state since the
// commit began, that took the decisions back. Otherwise (the fleet did
// not answer; its state is invalid or lost, and the copy is to be written
// over it; or it held none, lost after the conflict) they are taken back
// now.
func (s *State) Resolved(c Commit, asked bool) Next {
	if !asked || s.rewrite || s.taken == c.taken {
		return Next{Adopt: s.takeBack(c)}
	}
	return Next{}
}

// takeBack is the take-back of commit c's decisions: to its base, at the
// copy's revision when it is taken (Take), unless a state of the fleet's
// was taken since c began, which took them back. The revision may have
// moved on without a state taken: the fleet holds an invalid state, or
// lost it, and the base, the shared state the copy last had, is to be
// written over the fleet's at the revision found there. Nil when c had
// no base.
func (s *State) takeBack(c Commit) *Adopt {
	if c.Base == nil {
		return nil
	}
	return &Adopt{Rev: c.Rev, Value: c.Base, Force: true, taken: c.taken}
}

// Load is the fleet's answer to a load of the agent's state.
type Load uint8

// The answers to a load.
const (
	// Loaded: the fleet answered, with a state at the revision (0: none).
	LoadOK Load = iota
	// LoadSlow: the chain's time was spent (not tried, or cut).
	LoadSlow
	// LoadDown: the fleet could not be reached.
	LoadDown
	// LoadBad: the fleet answered with an invalid state, or an error
	// that is no outage.
	LoadBad
)

// Loaded takes the fleet's answer to a load (a refresh): the state val
// at rev; since is the copy's revision when the load was sent (Rev, read
// under the lock then). asked reports that the fleet answered. A state
// older than since means the fleet lost it: the copy is written again at
// the next flush (Lost). A state older than the copy's but not than
// since is only late: the copy took a newer one (its own commit's, say)
// while the answer was on its way. A state to take is in Adopt (Take
// decides); an invalid one is written over (Kick).
func (s *State) Loaded(since, rev uint64, val []byte, res Load) (n Next, asked bool) {
	switch res {
	case LoadSlow:
		s.resync = true // not down: the flusher compares it with the fleet
		return Next{}, false
	case LoadDown:
		return Next{}, false // the flusher resyncs every agent when the fleet is back
	case LoadBad:
		// The revision is the fleet's word for the invalid state
		// (redisfleet: 0, on which the next commit sets it aside): the
		// copy is written over it, late answer or not (a conflict then
		// brings the newer state).
		s.resync = false
		s.Invalid(rev)
		return Next{Kick: true}, true
	}
	s.resync = false
	if rev < since {
		s.Rev = rev
		s.rewrite = true
		n.Lost = true
	}
	if rev > 0 {
		n.Adopt = &Adopt{Rev: rev, Value: val}
	}
	return n, true
}

// Take decides whether a is taken into the copy (valid: its state
// decodes as the agent's): a state newer than the copy's; with Force (a
// take-back), one not older. An invalid state newer than the copy's is
// to be written over (kick). When Take reports true, the driver replaces
// the copy's shared state, taking back the decisions not committed, and
// calls Took with its encoding.
func (s *State) Take(a Adopt, valid bool) (take, kick bool) {
	if !valid {
		if a.Rev > s.Rev {
			s.Invalid(a.Rev)
			return false, true
		}
		return false, false
	}
	if a.Force {
		if s.taken != a.taken {
			// Taking decisions back: a state of the fleet's has been
			// taken since their commit began, and took them back.
			return false, false
		}
		a.Rev = s.Rev // the commit's, or past it over an invalid or lost state
	} else if a.Rev <= s.Rev {
		return false, false // not newer
	}
	if !a.Force {
		// A valid state, newer than the copy's: the fleet holds one
		// again, and the copy is not to be written over it.
		s.rewrite = false
	}
	s.Rev = a.Rev
	s.takingBack = a.Force
	s.taken++
	return true, false
}

// Took sets the base of the state just taken (Take): its encoding here.
// It returns the orphan decisions to check, those the state taken, the
// fleet's, is past the revision of (they are dropped then, landed or not:
// the fleet has moved on); the driver records each the state holds. A
// take-back is no state of the fleet's: it keeps them.
func (s *State) Took(base []byte) []Orphan {
	s.Base = base
	if len(s.orphans) == 0 || s.takingBack {
		return nil
	}
	var due []Orphan
	s.orphans = slices.DeleteFunc(s.orphans, func(o Orphan) bool {
		if s.Rev <= o.Rev {
			return false
		}
		due = append(due, o)
		return true
	})
	return due
}

// Settle drops the orphan decisions that landed reports the copy holds
// (Next.Check).
func (s *State) Settle(landed func(*Orphan) bool) {
	s.orphans = slices.DeleteFunc(s.orphans, func(o Orphan) bool { return landed(&o) })
}

// Invalid notes that the fleet holds an invalid state at rev: the copy
// keeps its own, and writes it over the fleet's at the next flush or
// decision. Its base stays the shared state it last had: a decision whose
// commit fails is taken back to it. The driver asks for a flush.
func (s *State) Invalid(rev uint64) {
	s.Rev = rev
	s.rewrite = true
}

// Notified takes a notification that the fleet is at rev. It reports
// whether the driver is to Refresh: rev is newer than the copy's, and no
// commit is in flight (its answer looks at the notification: Committed).
func (s *State) Notified(rev uint64) (refresh bool) {
	s.notified = max(s.notified, rev)
	return !s.committing && rev > s.Rev
}

// Resync asks for the copy to be compared with the fleet's state at the
// next flush (the fleet is back, or could not be asked in time).
func (s *State) Resync() { s.resync = true }

// Synced notes that the fleet's pooled counts answered at the copy's
// revision: no comparison is owed.
func (s *State) Synced() { s.resync = false }

// Owed reports whether the flusher owes the fleet a comparison (resync)
// or a rewrite.
func (s *State) Owed() bool { return s.resync || s.rewrite }

// Rewrite reports whether the copy is to be written over the fleet's
// state (lost, or invalid).
func (s *State) Rewrite() bool { return s.rewrite }
