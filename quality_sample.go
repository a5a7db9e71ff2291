package selfimprove

// quality is what a call reported of itself: its score and its cost.
type quality struct {
	score, cost    float64
	scored, costed bool
}

// any reports whether q holds a score or a cost.
func (q quality) any() bool { return q.scored || q.costed }
