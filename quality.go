package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"weak"
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

// scoreCtx is a call's context with its score and cost slot. It is never
// reused: fn, or a goroutine it started, may keep its context after it
// returned (a stream read later), and that context must stay the call's.
// A score or cost reported after the call was booked is lost (Loop.Score
// scores a call by ID).
type scoreCtx struct {
	context.Context
	score atomic.Uint64 // math.Float64bits of the score with the top bit set; 0: none; scoreSealed: booked
	cost  atomic.Uint64 // math.Float64bits of the cost so far
	paid  atomic.Bool   // AddCost reported a cost
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
		if c.cost.CompareAndSwap(old, math.Float64bits(min(math.Float64frombits(old)+cost, maxRecordCost))) {
			break
		}
	}
	c.paid.Store(true)
}

// release takes what c holds, once fn returned.
func (c *scoreCtx) release() quality {
	var q quality
	if b := c.score.Swap(scoreSealed); b != 0 && b != scoreSealed {
		q.score, q.scored = math.Float64frombits(b&^(1<<63)), true
	}
	if c.paid.Load() {
		q.cost, q.costed = math.Float64frombits(c.cost.Load()), true
	}
	return q
}

// scoreSealed is a score slot's value once the call was booked: a score
// given then is refused (AddScore), never dropped silently. It is no
// score's bits, which all have the top bit set.
const scoreSealed = 1

// costSlots is set once AddCost found neither a call's slot nor a loop's
// attempt context in its context: a cost was reported that no loop could
// book, so the calls of every Loop of the process carry a slot from then
// on. The price integrations report a cost of 0 outside any call when
// they are set up, so that none of their costs is lost. slotLoops holds
// the Loops to turn on (weakly: a Loop no longer used is collected), so
// that a call checks its own Loop's flag only.
var (
	costSlots atomic.Bool
	slotLoops struct {
		sync.Mutex
		live []weak.Pointer[Loop]
		kept int // len(live) after the last sweep of the collected
	}
)

// slotsFollow has l's slots follow costSlots: on now if it is set, else
// once it is.
func (l *Loop) slotsFollow() {
	slotLoops.Lock()
	defer slotLoops.Unlock()
	if costSlots.Load() {
		l.slots.Store(true)
		return
	}
	if len(slotLoops.live) >= 2*slotLoops.kept+16 {
		live := slotLoops.live[:0]
		for _, w := range slotLoops.live {
			if w.Value() != nil {
				live = append(live, w)
			}
		}
		clear(slotLoops.live[len(live):])
		slotLoops.live, slotLoops.kept = live, len(live)
	}
	slotLoops.live = append(slotLoops.live, weak.Make(l))
}

// allSlotsOn sets costSlots and turns on the slots of every Loop.
func allSlotsOn() {
	slotLoops.Lock()
	defer slotLoops.Unlock()
	if costSlots.Swap(true) {
		return
	}
	for _, w := range slotLoops.live {
		if l := w.Value(); l != nil {
			l.slots.Store(true)
		}
	}
	slotLoops.live, slotLoops.kept = nil, 0
}

// noteCost adds cost to the call ctx belongs to, if it carries a slot;
// otherwise, when ctx is an attempt context of a loop's (the call has a
// Budget, retries or nests calls), it turns that loop's slots on for the
// calls to come (see Loop.slots), and else those of every loop
// (costSlots).
func noteCost(ctx context.Context, cost float64) {
	if !(cost >= 0 && cost <= maxRecordCost) {
		return // NaN, negative, or more than any call costs
	}
	if c, _ := ctx.Value(scoreKey{}).(*scoreCtx); c != nil {
		c.addCost(cost)
	} else if a, _ := ctx.Value(callKey{}).(*callCtx); a != nil && a.loop != nil {
		if !a.loop.slots.Load() {
			a.loop.slots.Store(true)
		}
	} else if !costSlots.Load() {
		allSlotsOn()
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
// The loop gives fn a context that can carry a score once it was asked for
// one: l's first AddScore finds none, returns ErrUnknownCall, and turns
// the slots on for the calls of l that follow, at one small allocation a
// call (see docs/quality.md); AddScore(context.Background(), 0) at
// start-up does it without losing a score. Loop.Score, with the Report's
// ID, scores any call and allocates nothing.
func (l *Loop) AddScore(ctx context.Context, score float64) error {
	if err := checkScore(score); err != nil {
		return err
	}
	c, _ := ctx.Value(scoreKey{}).(*scoreCtx)
	if c == nil {
		l.slots.Store(true)
		return fmt.Errorf("%w: the context carries no call to score (the calls that follow will)", ErrUnknownCall)
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

// slot gives the call that runs with ctx a score slot when l's slots are
// on, under its attempt context att if it has one; it returns the context
// to run the call with, and the slot (nil when off).
func (l *Loop) slot(ctx context.Context, att *callCtx) (context.Context, *scoreCtx) {
	if !l.slots.Load() {
		return ctx, nil
	}
	sc := &scoreCtx{Context: ctx}
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
// verification is judged on it at once (see RollbackPolicy). A call ID
// counts once: a score of an ID scored before (among the agent's last
// MaxScoreKeys scores by ID) is a duplicate, which returns nil and counts
// nothing, so that a retried score is not counted twice (ScoreCall says
// so, and takes a key of the caller's). A score that is NaN or outside
// [0, 1] returns ErrInvalidScore, an ID the agent cannot place
// ErrUnknownCall, one past the horizon ErrScoreTooLate, and none of them
// changes anything. Scores are saved with the agent's state, at the next
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
// A score counts once per key: key is the score's idempotency key, and
// 0 takes the call ID as the key. A score whose key the agent saw among
// its last MaxScoreKeys (128) scores by ID is a duplicate: ScoreCall
// returns it with Duplicate set and a nil error, and it counts nothing,
// so a grader fed by an at-least-once queue acknowledges a redelivered
// score as it would the first. The first score stands: the judgement it
// went into cannot unsee it. Two calls of an agent that end within the
// same millisecond under the same config version share an ID, so the
// second's score counts only with keys of their own (a grader that has
// an ID per answer: a hash of it, not 0).
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
	if err != nil {
		return ScoreResult{}, err
	}
	if !live && !l.view(agentID, func(*agentState) {}) {
		// An agent neither in memory nor stored made no call: a score of
		// it creates nothing.
		return ScoreResult{}, fmt.Errorf("%w: agent %q has made no call", ErrUnknownCall, agentID)
	}
	if key == 0 {
		key = callID // never 0 (parseCallID)
	}
	in := input{kind: inScore, now: now.UnixNano(), low: low, key: key, score: score}
	var rep Report
	if _, err := l.step(context.Background(), nil, agentID, &in, &rep, nil); err != nil {
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
	a.s.noteScoreKey(in.key)
	now := time.Unix(0, in.now)
	a.dirty = true
	a.s.bookQuality(version, route, quality{score: in.score, scored: true}, false)
	a.s.judgeScored(version, now, &l.rules, eff)
	a.s.watchScore(version, in.score, now, &l.rules, eff)
	a.s.exploreDue(now, &l.rules, eff)
	return nil
}
