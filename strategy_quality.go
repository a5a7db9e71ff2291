package selfimprove

import (
	"fmt"
	"slices"
)

// qualityRule is the rule filed when a fall of quality has no route left
// to move to.
const qualityRule = "The answers got worse without failing (a provider's silent model update, a changed prompt or input): compare recent answers with older ones, pin the model version, or add a fallback route or a candidate config."

// qualityAnswer is the built-in strategy's answer to a fall of the mean
// score (Analysis.QualityDrop): the route moves down the ladder to the
// next live route (not dead, not rolled back before), verified on quality
// like any change; with none, a proposal for a person.
func qualityAnswer(a *Analysis) *Tweak {
	why := qualityWatchReason(a)
	if next, name, ok := a.nextCandidate("", false); ok {
		return &Tweak{Config: next, Reason: fmt.Sprintf("try candidate %q: the answers got worse without failing; %s", name, why), Confidence: 1}
	}
	if !a.Routes.empty() {
		ladder := a.Routes.ladder()
		cur := a.Routes.name(a.Config.Route)
		for _, r := range ladder[slices.Index(ladder, cur)+1:] {
			next := a.Config.clone()
			next.Route = r
			if a.dead(r) || slices.ContainsFunc(a.Rejected, func(t Tweak) bool {
				return !t.Explored && (t.Config.Equal(next) || repeats(a.Config, next, t.Config))
			}) {
				continue
			}
			return &Tweak{Config: next, Reason: fmt.Sprintf("move to route %q: the answers on route %q got worse without failing; %s", r, cur, why), Confidence: 1}
		}
	}
	return &Tweak{Config: a.Config, Review: true, Reason: "the answers got worse without failing, and no route is left to move to; " + why, Rule: qualityRule}
}

// nextCandidate returns the first of a's candidates that changes a's
// config, runs on no dead route, is within Config's bounds, and does not
// repeat a tweak refused for cluster (empty: for any; one refused after
// an exploration for no gain, only for explore): its config and name; ok
// is false when there is none.
func (a *Analysis) nextCandidate(cluster string, explore bool) (cfg Config, name string, ok bool) {
	for i := range a.Candidates {
		c := &a.Candidates[i]
		next := c.apply(a.Config)
		if next.Equal(a.Config) || next.Route != a.Config.Route && a.dead(next.Route) || next.validate() != nil ||
			slices.ContainsFunc(a.Rejected, func(t Tweak) bool {
				return (explore || !t.Explored) && (cluster == "" || t.Cluster == "" || t.Cluster == cluster) &&
					(t.Config.Equal(next) || repeats(a.Config, next, t.Config))
			}) {
			continue
		}
		return next, c.name(i), true
	}
	return Config{}, "", false
}

// exploreTweak is the loop's answer to an exploration: the next
// candidate, nil when none.
func exploreTweak(an *Analysis) *Tweak {
	next, name, ok := an.nextCandidate("", true)
	if !ok {
		return nil
	}
	st := an.Stats
	return &Tweak{Config: next, Confidence: 1,
		Reason: fmt.Sprintf("exploring candidate %q while the agent is healthy (mean quality %.3f, %d scored calls; cost per successful call %.4g)",
			name, st.Quality, st.Scored, st.CostPerSuccess)}
}
