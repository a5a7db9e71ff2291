package selfimprove

// What a score by ID did (see Loop.ScoreCall).

// ScoreResult is what a score by ID (Loop.ScoreCall) did: the version
// it was credited to, whether it counted, and the decision it led to,
// if any. At most one of Confirmed, RolledBack and Applied is set.
type ScoreResult struct {
	// Version is the config version the score was credited to: the one
	// the call ran under. Set for a duplicate too.
	Version int
	// Duplicate reports that the score's key (the key given to
	// ScoreCall; never the call ID) was scored before, among the agent's
	// last MaxScoreKeys keyed scores: this score counted nothing and
	// decided nothing.
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
