package selfimprove

import (
	"fmt"
	"time"
)

// The built-in strategy's move for streams that stall before their first
// token (failure.ClassFirstTokenTimeout). The whole call's Timeout is
// never the answer: the stream had not begun, and a longer deadline only
// waits longer on a request the upstream left hanging.

// minFirstTokens is how many measured times to first token the strategy
// needs before it judges the first-token bound from them.
const minFirstTokens = 20

// firstTokenTight is the quantile of the measured times to first token
// that, above half the bound, makes the bound too tight.
const firstTokenTight = 0.9

// firstTokenCap is the highest FirstTokenTimeout the strategy sets for
// cur: MaxFirstTokenTimeout (default 1 minute), and no more than cur's
// Timeout when it has one.
func (s *BuiltinStrategy) firstTokenCap(cur Config) time.Duration {
	c := s.MaxFirstTokenTimeout
	if c <= 0 {
		c = time.Minute
	}
	if cur.Timeout > 0 {
		c = min(c, cur.Timeout)
	}
	return min(c, maxFirstTokenTimeout)
}

// firstToken is the move for stalls before the first token: raise
// FirstTokenTimeout by half when the measured times to first token say
// the bound is too tight (see BuiltinStrategy.MaxFirstTokenTimeout), else
// one more attempt.
func (p *plan) firstToken() *Tweak {
	cur, h := p.cur, &p.a.FirstToken
	if cur.FirstTokenTimeout <= 0 || h.Count < minFirstTokens {
		return p.oneMoreAttempt()
	}
	q := h.quantile(firstTokenTight)
	if q <= cur.FirstTokenTimeout/2 {
		return p.oneMoreAttempt()
	}
	raised := cur.FirstTokenTimeout * 3 / 2
	p.next.FirstTokenTimeout = min(raised, p.s.firstTokenCap(cur))
	evidence := fmt.Sprintf("90%% of %d first tokens within %v, more than half the bound %v", h.Count, q.Round(time.Millisecond), cur.FirstTokenTimeout)
	switch {
	case p.next.FirstTokenTimeout <= cur.FirstTokenTimeout:
		// Beyond the cap, unless past the whole call's Timeout (which
		// would then end the stall first) or the config's limit.
		var beyond *Config
		if raised <= maxFirstTokenTimeout && (cur.Timeout <= 0 || raised < cur.Timeout) {
			c := cur.clone()
			c.FirstTokenTimeout = raised
			beyond = &c
		}
		return p.review(fmt.Sprintf("first-token timeout %v is at its cap (%s)", cur.FirstTokenTimeout, evidence), beyond)
	case p.rejected(p.next):
		return p.review("raising the first-token timeout was rolled back before", nil)
	}
	return p.safe(fmt.Sprintf("stalls before the first token, whose bound is too tight (%s): raise the first-token timeout from %v to %v",
		evidence, cur.FirstTokenTimeout, p.next.FirstTokenTimeout))
}

// quantile estimates the q-quantile of h's durations, interpolating
// within the bucket that holds it; the last bound for one beyond them; 0
// for an empty h.
func (h *Histogram) quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var seen float64
	for i, c := range h.Counts {
		if c == 0 || seen+float64(c) < rank {
			seen += float64(c)
			continue
		}
		if i >= len(h.Bounds) {
			break
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = h.Bounds[i-1]
		}
		return lo + time.Duration(float64(h.Bounds[i]-lo)*(rank-seen)/float64(c))
	}
	if len(h.Bounds) == 0 {
		return 0
	}
	return h.Bounds[len(h.Bounds)-1]
}
