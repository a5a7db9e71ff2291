package oaicompat

// MaxChoices bounds the choices of one streamed answer that a Choices
// follows: OpenAI's n is at most 128.
const MaxChoices = 128

// Choices follows the choices of a streamed chat completion by their
// index: which came, and which said why they finished (a finish_reason).
// An answer asked for with n > 1 streams its choices side by side, and
// is complete only once every one of them has finished. The zero value
// is ready; it is not safe for concurrent use.
type Choices struct {
	seen, done [MaxChoices / 64]uint64
	open       int  // choices seen that have not finished
	any        bool // a choice came
	beyond     bool // a choice's index was outside [0, MaxChoices)
}

// Note notes a chunk's choice of index i, finished when the chunk gave
// its finish_reason.
func (c *Choices) Note(i int64, finished bool) {
	if i < 0 || i >= MaxChoices {
		c.beyond = true // not followed: Finished cannot vouch for it
		return
	}
	w, bit := i/64, uint64(1)<<(i%64)
	if c.seen[w]&bit == 0 {
		c.seen[w] |= bit
		c.open++
		c.any = true
	}
	if finished && c.done[w]&bit == 0 {
		c.done[w] |= bit
		c.open--
	}
}

// Finished reports whether a choice came and every choice that came
// said why it finished. An index outside [0, MaxChoices) makes it
// false.
func (c *Choices) Finished() bool { return c.any && c.open == 0 && !c.beyond }
