package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// analysisMemories is how many memories an Analysis carries.
const analysisMemories = 5

// startAnalysis runs the strategy for a in the background and waits for it
// while ctx lasts. The strategy's own deadline bounds the wait.
func (l *Loop) startAnalysis(ctx context.Context, a *agent, an *Analysis, th Threshold, rep *Report, w waits) {
	l.bgMu.Lock()
	if l.closed {
		l.bgMu.Unlock()
		l.analysisOff(a, false)
		return
	}
	l.bg.Add(1)
	l.bgMu.Unlock()
	type result struct {
		ch  *Change
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer l.bg.Done()
		ch, err := l.analyze(ctx, a, an, th, w)
		done <- result{ch, err}
	}()
	select {
	case r := <-done:
		rep.Improvement = r.ch
		if r.err != nil {
			rep.LoopErr = errors.Join(rep.LoopErr, r.err)
		}
	case <-ctx.Done():
		// The caller has gone; the analysis finishes on its own and
		// announces its outcome with an event.
	}
}

// analyze runs the strategy under its deadline, then has the agent's
// state take its answer (start the cooldown, apply the tweak or file the
// proposal) and saves it. A change that cannot be saved is taken back.
// With a fleet, the lease, the reload, the commit and the release are
// waits of w (zero: their own; see waits).
func (l *Loop) analyze(ctx context.Context, a *agent, an *Analysis, th Threshold, w waits) (*Change, error) {
	var (
		tw   *Tweak
		also []Tweak
		err  error
	)
	if !l.leaseAnalysis(a, an, &w) {
		// Another replica runs the strategy for this trigger, or the
		// fleet cannot be reached: nothing new is applied.
		l.analysisOff(a, true)
		return nil, nil
	}
	defer l.releaseAnalysis(a, w)
	l.gather(a, an)
	if an.explore {
		tw = exploreTweak(an)
	} else if l.strategy != nil {
		l.m.strategyRuns.Add(1)
		began := time.Now()
		tw, also, err = l.callStrategy(ctx, an)
		w.exclude(time.Since(began)) // the strategy has its own timeout
		if err != nil {
			l.m.strategyErrors.Add(1)
			l.log.Warn("selfimprove: strategy failed", "agent", a.id, "error", err)
		}
	}
	if tw != nil && !tw.Review && l.proposeOnly(a) {
		c := *tw // the strategy's own value stays as it made it
		c.Review, tw = true, &c
	}
	if err == nil && (tw != nil && tw.Review || len(also) > 0) {
		// Saved before the proposal is, so that the list of agents with
		// proposals covers it.
		err = l.addProposalAgent(a.id)
	}
	in := input{kind: inAnalysis, lock: lockThis, more: &inputMore{tweak: true, an: an, th: th, tw: tw, also: also, err: err, undo: unmake}}
	var rep Report
	l.step(ctx, a, a.id, &in, &rep, w)
	return rep.Improvement, rep.LoopErr
}

// applyAnalysis has a's state take the strategy's answer of in: start the
// cooldown, apply the tweak or file it for review, and file the window's
// other clusters' proposals. a.mu is held.
func (a *agent) applyAnalysis(l *Loop, in *input, eff *effects) {
	x, now := in.more, time.Unix(0, in.now)
	var terr error
	*eff, terr = a.s.finishAnalysis(now, x.an, x.th, x.tw, x.err, &l.rules)
	for i := range x.also {
		// The window's other clusters: each its proposal, whatever
		// became of tw.
		if ferr := a.s.fileReview(now, x.an, &x.also[i], &l.rules, eff); ferr != nil {
			terr = errors.Join(terr, ferr)
		}
	}
	eff.refused = terr
}

// analysisOff ends a's analysis that does not run (and its early
// trigger, when early is set), through the driver.
func (l *Loop) analysisOff(a *agent, early bool) {
	in := input{kind: inFunc, lock: lockThis, more: &inputMore{op: func(a *agent) (effects, error) {
		a.s.analyzing = false
		if early {
			a.s.early = false
		}
		return effects{}, nil
	}}}
	var rep Report
	l.step(context.Background(), a, a.id, &in, &rep, waits{})
}

// gather completes an, the analysis of a, with what the whole loop knows:
// the causes shared with other agents, the routes and the dead ones, the
// transient floor, the times to first token, and the failure memory's
// clusters most like the one the analysis is for (Analysis.Trigger).
func (l *Loop) gather(a *agent, an *Analysis) {
	an.Shared = l.shared.causes(an.Time.UnixNano(), a.id, true)
	an.Routes = l.Routes(a.id)
	an.Candidates = l.Candidates(a.id)
	an.TransientAttempts = l.retryRules.floor
	an.FirstToken = a.tel.firstTokens()
	for _, d := range l.dead.list(an.Time.UnixNano()) {
		if !an.dead(d.Route) {
			an.DeadRoutes = append(an.DeadRoutes, d)
		}
	}
	if top := an.target(); top != nil {
		an.Memories = l.mem.similar(top.Signature, analysisMemories, an.Time.UnixNano())
	}
}

// unmake takes back the change ch that could not be saved: a change
// that cannot be recorded is not made. a.mu is held.
func unmake(a *agent, ch *Change) (eff effects) {
	a.dropQueued(func(ev *Event) bool {
		return ev.Type == EventImprovementApplied && ev.Change != nil && ev.Change.ID == ch.ID
	})
	eff.publish = a.s.unapply(ch)
	return eff
}

// callStrategy calls the strategy in its own goroutine, so that a strategy
// that ignores its context delays nobody beyond the deadline.
// With the built-in strategy, it also returns the proposals for the
// window's other classes (see BuiltinStrategy.answers).
func (l *Loop) callStrategy(ctx context.Context, an *Analysis) (*Tweak, []Tweak, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.strategyTimeout)
	defer cancel()
	type result struct {
		tw   *Tweak
		also []Tweak
		err  error
	}
	res := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				l.m.strategyPanics.Add(1)
				res <- result{nil, nil, fmt.Errorf("%w: %v", ErrStrategyPanic, r)}
			}
		}()
		if b, ok := l.strategy.(*BuiltinStrategy); ok && b != nil {
			tw, also := b.answers(*an)
			res <- result{tw, also, nil}
			return
		}
		tw, err := l.strategy.Analyze(sctx, *an)
		res <- result{tw, nil, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, nil, fmt.Errorf("selfimprove: strategy: %w", r.err)
		}
		if r.tw != nil { // its texts as the loop keeps them, before they are logged or stored
			tw := *r.tw
			tw.Reason, tw.Rule = freeText(tw.Reason), freeText(tw.Rule)
			r.tw = &tw
		}
		return r.tw, r.also, nil
	case <-sctx.Done():
		l.m.strategyTimeouts.Add(1)
		return nil, nil, fmt.Errorf("%w after %v", ErrStrategyTimeout, l.strategyTimeout)
	}
}
