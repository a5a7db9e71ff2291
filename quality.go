package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Quality and cost (docs/quality.md).
//
// A call can be scored in [0, 1] inside fn (Loop.AddScore), or later by
// the ID in its Report (Loop.Score); fn reports its cost with AddCost.
// Scores and costs are booked per config version (qualityRec), in the
// agent's state behind a pointer allocated at its first score or cost,
// so that an agent that uses neither stays in its size class.
//
// A call's ID names the call's config version and the millisecond it
// ended, with a check byte: Score finds the version, and its route, among
// the configs the agent keeps, without a record of every call, so that
// the success path writes nothing but the ID into its Report.

type scoreKey struct{}

// scoreCtx is a call's context with its score and cost slot. Every
// tracked call carries one, whatever other calls or Loops did before. It
// is never reused: fn, or a goroutine it started, may keep its context
// after it returned (a stream read later), and that context must stay the
// call's, so that a score given with it then is refused (ErrScoreTooLate),
// never booked to another call. The slots are allocated slotsPerBlock at
// a time (slotBlock), so that a call allocates nothing but for one call
// in slotsPerBlock.
type scoreCtx struct {
	context.Context
	score atomic.Uint64 // math.Float64bits of the score with the top bit set; 0: none; scoreSealed: booked
	cost  atomic.Uint64 // math.Float64bits of the cost so far with the top bit set; 0: none
}

// Value returns c for scoreKey.
func (c *scoreCtx) Value(k any) any {
	if k == (scoreKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// addCost adds cost to the call's, which stays at most maxRecordCost: a
// sum of costs is always finite, so that the state always saves.
func (c *scoreCtx) addCost(cost float64) {
	for {
		old := c.cost.Load()
		sum := min(math.Float64frombits(old&^(1<<63))+cost, maxRecordCost)
		if c.cost.CompareAndSwap(old, math.Float64bits(sum)|1<<63) {
			break
		}
	}
}

// release takes what c holds, once fn returned.
func (c *scoreCtx) release() quality {
	var q quality
	if b := c.score.Swap(scoreSealed); b != 0 && b != scoreSealed {
		q.score, q.scored = math.Float64frombits(b&^(1<<63)), true
	}
	if b := c.cost.Load(); b != 0 {
		q.cost, q.costed = math.Float64frombits(b&^(1<<63)), true
	}
	return q
}

// scoreSealed is a score slot's value once the call was booked: a score
// given then is refused (AddScore), never dropped silently. It is no
// score's bits, which all have the top bit set.
const scoreSealed = 1

// slotsPerBlock is how many score slots are allocated together: 31 of
// 32 bytes and the block's count fill a 1 kB size class. A context kept
// after its call keeps its block, and the contexts the block's other
// calls were made with, from being collected: at most 1 kB and 30
// contexts, for as long as it is kept.
const slotsPerBlock = 31

// slotBlock is slotsPerBlock slots, each given to one call only.
type slotBlock struct {
	used  int
	slots [slotsPerBlock]scoreCtx
}

// slotBlocks holds the blocks with slots still to give, one per P at
// most (sync.Pool): taking a slot takes no lock and shares no cache line
// with the other Ps. A block the pool drops at a collection leaves its
// slots unused: memory, never a wrong booking.
var slotBlocks = sync.Pool{New: func() any { return new(slotBlock) }}

// newSlot returns a slot, never given before, for a call under ctx.
func newSlot(ctx context.Context) *scoreCtx {
	b := slotBlocks.Get().(*slotBlock)
	sc := &b.slots[b.used]
	if b.used++; b.used < slotsPerBlock {
		slotBlocks.Put(b)
	}
	sc.Context = ctx
	return sc
}

// noteCost adds cost to the call ctx belongs to, if it carries a slot:
// a cost reported outside a tracked call is booked nowhere.
func noteCost(ctx context.Context, cost float64) {
	if !(cost >= 0 && cost <= maxRecordCost) {
		return // NaN, negative, or more than any call costs
	}
	if c, _ := ctx.Value(scoreKey{}).(*scoreCtx); c != nil {
		c.addCost(cost)
	}
}

// checkScore refuses NaN and scores outside [0, 1].
func checkScore(score float64) error {
	if !(score >= 0 && score <= 1) {
		return fmt.Errorf("%w: %v, not in [0, 1]", ErrInvalidScore, score)
	}
	return nil
}

// AddScore scores, in [0, 1], the call whose fn was given ctx (or a
// context derived from it): fn calls it before it returns, and the score
// is booked with the call, for the config version it ran under. A later
// AddScore of the same call replaces the score. A score that is NaN or
// outside [0, 1] returns ErrInvalidScore and changes nothing; one given
// with a context kept after fn returned (the call is booked then) returns
// ErrScoreTooLate and is not booked: Loop.Score scores the call by ID.
//
// Every call the loop tracks gives fn a context that carries its score,
// from a Loop's first call on: nothing needs to be done at start-up. A
// context that carries no tracked call (one made outside fn, given to a
// call that ran untracked, see ExecuteWithImprovement, or to a call of a
// Loop made WithCallScores(false)) returns ErrUnknownCall and changes
// nothing. Loop.Score, with the Report's ID,
// scores a call later and allocates nothing.
func (l *Loop) AddScore(ctx context.Context, score float64) error {
	if err := checkScore(score); err != nil {
		return err
	}
	c, _ := ctx.Value(scoreKey{}).(*scoreCtx)
	if c == nil {
		return fmt.Errorf("%w: the context carries no call to score (not a context given to fn by a tracked call of a Loop with call scores)", ErrUnknownCall)
	}
	for b := math.Float64bits(score) | 1<<63; ; {
		old := c.score.Load()
		if old == scoreSealed {
			return fmt.Errorf("%w: the call was booked when fn returned, without this score (score it by its Report's ID with Loop.Score)", ErrScoreTooLate)
		}
		if c.score.CompareAndSwap(old, b) {
			return nil
		}
	}
}

// slot gives the call that runs with ctx its score slot, under its
// attempt context att if it has one; it returns the context to run the
// call with, and the slot.
func (l *Loop) slot(ctx context.Context, att *callCtx) (context.Context, *scoreCtx) {
	sc := newSlot(ctx)
	if att != nil {
		att.Context = sc
	}
	return sc, sc
}

// Score scores, in [0, 1], the call of agentID whose Report carried
// callID, up to ScoreHorizon (one hour) after it ended: for a grader or a
// user's verdict that comes later. The score is credited to the config
// version the call ran under, and to its route, also after that config was
// replaced or rolled back and after a restart; a change under
// verification is judged on it at once (see RollbackPolicy). Each score
// is a sample: to have a retried score count once, give it a key with
// ScoreCall (a call ID is no such key: two calls that end within the same
// millisecond under the same version share one). A score that is NaN or outside
// [0, 1] returns ErrInvalidScore, an ID the agent cannot place
// ErrUnknownCall, one past the horizon ErrScoreTooLate, a Loop on a
// ReadOnlyStore ErrReadOnly, and none of them changes anything. Scores
// are saved with the agent's state, at the next
// flush or with the decision they lead to.
func (l *Loop) Score(agentID string, callID uint64, score float64) error {
	_, err := l.ScoreCall(agentID, callID, score, 0)
	return err
}

// ScoreCall scores, in [0, 1], the call of agentID whose Report carried
// callID, as Score does, and says what it did (ScoreResult): the version
// credited, whether it counted, and the change it confirmed, rolled back
// or applied, or the analysis it started.
//
// A score with a key counts once: key is the score's idempotency key (0:
// none, the score is a sample like any). A score whose key the agent saw
// among its last MaxScoreKeys (128) keyed scores is a duplicate:
// ScoreCall returns it with Duplicate set and a nil error, and it counts
// nothing, so a grader fed by an at-least-once queue acknowledges a
// redelivered score as it would the first. The first score stands: the
// judgement it went into cannot unsee it. The call ID is not used as the
// key: two calls of an agent that end within the same millisecond under
// the same config version share an ID, and their scores are two samples
// (a good key is a hash of the answer's or the grader's message ID).
//
// The errors are Score's, and come with the zero ScoreResult, but for an
// error of saving what the score decided (the store, the fleet), which
// comes with the result: the score was booked.
func (l *Loop) ScoreCall(agentID string, callID uint64, score float64, key uint64) (ScoreResult, error) {
	if err := checkScore(score); err != nil {
		return ScoreResult{}, err
	}
	if l.isClosed.Load() {
		return ScoreResult{}, ErrClosed
	}
	if err := checkAgentID(agentID); err != nil {
		return ScoreResult{}, err
	}
	if _, ro := l.store.(*ReadOnlyStore); ro {
		// Booked in memory, it would never be saved: refused, as every
		// operator's mutation of a read-only Loop is.
		return ScoreResult{}, fmt.Errorf("selfimprove: score of agent %q: %w", agentID, ErrReadOnly)
	}
	now := l.clock.Now()
	v, live := l.agents.Load(agentID)
	var agentKey uint64
	if live {
		if in := v.(*agent).cfg.Load(); in != nil {
			agentKey = in.key // the agent's key, hashed once when it was loaded
		}
	}
	if agentKey == 0 {
		agentKey = l.keys.of(agentID)
	}
	low, age, err := parseCallID(callID, agentKey, now)
	if errors.Is(err, ErrScoreTooLate) && !live && !l.view(agentID, func(*agentState) {}) {
		err = fmt.Errorf("%w: agent %q has made no call", ErrUnknownCall, agentID) // no call of its can be late
	}
	if err != nil {
		return ScoreResult{}, err
	}
	if !live && !l.view(agentID, func(*agentState) {}) {
		// An agent neither in memory nor stored made no call: a score of
		// it creates nothing.
		return ScoreResult{}, fmt.Errorf("%w: agent %q has made no call", ErrUnknownCall, agentID)
	}
	in := input{kind: inScore, now: now.UnixNano(), low: low, key: key, score: score}
	var rep Report
	if _, err := l.step(context.Background(), nil, agentID, &in, &rep, waits{}); err != nil {
		switch {
		case errors.Is(err, errNoVersion):
			return ScoreResult{}, fmt.Errorf("%w: agent %q keeps no config version ending in %d (the call ended %v ago)", ErrUnknownCall, agentID, low, age.Round(time.Millisecond))
		case errors.Is(err, errDuplicateScore):
			return ScoreResult{Version: int(in.low), Duplicate: true}, nil
		}
		return ScoreResult{}, err
	}
	return ScoreResult{Version: int(in.low), Confirmed: rep.Confirmed, RolledBack: rep.Rollback,
		Analysis: rep.ImprovementTriggered, Applied: rep.Improvement}, rep.LoopErr
}

// errNoVersion refuses a score of a call whose version the agent does
// not keep (see Loop.Score).
var errNoVersion = errors.New("selfimprove: no such version")

// errDuplicateScore refuses, in the transition, a score whose key was
// scored before: ScoreCall reports it as a duplicate, not an error.
var errDuplicateScore = errors.New("selfimprove: duplicate score")

// applyScore applies the score of in to a: booked for the version and
// route that made the call, judged, watched and explored on. a.mu is
// held.
func (a *agent) applyScore(l *Loop, in *input, eff *effects) error {
	version, route, ok := a.s.placeVersion(in.low)
	if !ok || a.s.Tracker.Total == 0 { // an agent that made no call has none to score
		return errNoVersion
	}
	if in.low = uint64(version); a.s.scoreSeen(in.key) {
		return errDuplicateScore
	}
	if in.key != 0 {
		a.s.noteScoreKey(in.key)
	}
	now := time.Unix(0, in.now)
	a.dirty = true
	a.s.bookQuality(version, route, quality{score: in.score, scored: true}, false)
	a.s.judgeScored(version, now, &l.rules, eff)
	a.s.watchScore(version, in.score, now, &l.rules, eff)
	a.s.exploreDue(now, &l.rules, eff)
	return nil
}
