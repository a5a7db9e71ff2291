package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scores by ID that say what they decided, and that count once (see
// Loop.ScoreCall).

// ScoreResult is what a score by ID (Loop.ScoreCall) did: the version
// it was credited to, whether it counted, and the decision it led to,
// if any. At most one of Confirmed, RolledBack and Applied is set.
type ScoreResult struct {
	// Version is the config version the score was credited to: the one
	// the call ran under. Set for a duplicate too.
	Version int
	// Duplicate reports that the score's key (the call ID, or the key
	// given) was scored before, among the agent's last MaxScoreKeys
	// scores by ID: this score counted nothing and decided nothing.
	Duplicate bool
	// Confirmed is the change whose verification this score completed,
	// kept; RolledBack the change it rolled back (a fall of quality, or
	// a cost-down whose quality was shown to suffer). Nil otherwise.
	Confirmed  *Change
	RolledBack *Change
	// Analysis reports that the score started an analysis: the watch of
	// the mean score saw a fall, or the agent's candidates are explored
	// (see docs/quality.md). Applied is the change the analysis applied
	// while ScoreCall waited for it, if any; a change that comes later
	// is announced by its event.
	Analysis bool
	Applied  *Change
}

// MaxScoreKeys is how many keys of its latest scores by ID an agent
// remembers (Loop.ScoreCall): a retried score counts once if no more
// than MaxScoreKeys other scores of the agent by ID came in between. The
// keys take 8 bytes each (1 KiB), held only by agents scored by ID, and
// are kept in memory: a score retried after a restart, after the agent
// was evicted from memory (WithMaxAgents), or at another replica of a
// fleet counts again.
const MaxScoreKeys = 128

// scoreKeys are the keys of an agent's latest scores by ID, a ring.
type scoreKeys struct {
	keys [MaxScoreKeys]uint64 // 0: empty
	next uint8                // the slot the next key takes
}

// has reports whether key is among k's (nil: none).
func (k *scoreKeys) has(key uint64) bool {
	if k == nil {
		return false
	}
	for _, x := range &k.keys {
		if x == key {
			return true
		}
	}
	return false
}

// add adds key to k, over the oldest.
func (k *scoreKeys) add(key uint64) {
	k.keys[k.next%MaxScoreKeys] = key
	k.next = (k.next + 1) % MaxScoreKeys
}

// scoreSeen reports whether a score with key was booked among the
// agent's latest scores by ID.
func (s *agentState) scoreSeen(key uint64) bool {
	return s.Quality != nil && s.Quality.Keys.has(key)
}

// noteScoreKey remembers key as a score's booked by ID.
func (s *agentState) noteScoreKey(key uint64) {
	if s.Quality == nil {
		s.Quality = new(qualityBook)
	}
	if s.Quality.Keys == nil {
		s.Quality.Keys = new(scoreKeys)
	}
	s.Quality.Keys.add(key)
}

// errDuplicateScore refuses, in the transition, a score whose key was
// scored before: ScoreCall reports it as a duplicate, not an error.
var errDuplicateScore = errors.New("selfimprove: duplicate score")

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
