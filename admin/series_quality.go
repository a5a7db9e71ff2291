package admin

import (
	"math"
	"strconv"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// qcum is quality and cost counters (docs/quality.md): the scores and
// their sum, the calls with a cost, the successful ones among them, and
// their total cost.
type qcum struct {
	scored, costed, costOK uint64
	sum, cost              float64
}

// minus returns q less b, each field at least 0 (a version's record the
// loop dropped and made again starts from zero).
func (q qcum) minus(b qcum) qcum {
	sub := func(x, y uint64) uint64 { return x - min(x, y) }
	return qcum{scored: sub(q.scored, b.scored), costed: sub(q.costed, b.costed), costOK: sub(q.costOK, b.costOK),
		sum: max(q.sum-b.sum, 0), cost: max(q.cost-b.cost, 0)}
}

func (q qcum) plus(b qcum) qcum {
	return qcum{q.scored + b.scored, q.costed + b.costed, q.costOK + b.costOK, q.sum + b.sum, q.cost + b.cost}
}

// qcumOf returns the counters of st, a version's figures. Stats has no
// count of the successful calls with a cost: it is the cost over
// CostPerSuccess, and when the calls cost nothing, all of them (their
// cost per success is 0 whichever succeeded).
func qcumOf(st selfimprove.Stats) qcum {
	q := qcum{scored: uint64(max(st.Scored, 0)), costed: uint64(max(st.Costed, 0)), sum: st.Quality * float64(st.Scored), cost: st.Cost}
	switch {
	case st.CostPerSuccess > 0:
		q.costOK = uint64(math.Round(st.Cost / st.CostPerSuccess))
	case st.Cost == 0:
		q.costOK = q.costed
	}
	return q
}

// qualityInc returns the scores and costs booked for the config version
// in force since the timeline's last sample of them, from o's figures:
// all of them at the first sample and for a version never sampled (a
// new config), none for a version in force again (a rollback: its
// counters hold its past). Scores booked for another version (a late
// score of the config before a change) are not in the timeline.
func (s *timeline) qualityInc(o *selfimprove.AgentView) qcum {
	v := o.Config.Version
	raw := qcumOf(o.Versions[v])
	var inc qcum
	switch {
	case !s.qhas || v > s.qmax:
		inc = raw
	case v == s.qv:
		inc = raw.minus(s.qraw)
	}
	s.qv, s.qraw, s.qmax, s.qhas = v, raw, max(s.qmax, v), true
	s.qon = s.qon || len(o.Versions) > 0
	return inc
}

// wantsQuality reports that the sample of agent id at now needs its
// quality and cost figures, which only Loop.View reads (it takes the
// agent's lock): always for an agent that has scores or costs, once a
// quarter hour for the others (the day's slot), to find those that begin.
func (p *sampler) wantsQuality(now time.Time, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.agents[id]
	return s == nil || s.qon || !s.has || now.UnixNano()/int64(tiers[1].width) != s.rings[1].head
}

// setQuality sets the quality and cost fields of sp from p.
func setQuality(sp *SeriesPoint, p *point) {
	sp.Scored, sp.Costed = int(p.scored), int(p.costed)
	if p.scored > 0 {
		sp.Quality = wide(p.quality)
	}
	if !math.IsNaN(float64(p.cps)) {
		c := wide(p.cps)
		sp.CostPerSuccess = &c
	}
}

// wide returns f as the float64 of its shortest decimal form: 0.8, not
// 0.800000011920929.
func wide(f float32) float64 {
	x, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return x
}

// fillQuality sets the quality and cost fields of p from d, the slot's
// scores and costs.
func fillQuality(p *point, d qcum) {
	p.scored, p.costed, p.cps = uint32(d.scored), uint32(d.costed), float32(math.NaN())
	if d.scored > 0 {
		p.quality = float32(min(max(d.sum/float64(d.scored), 0), 1))
	}
	if d.costOK > 0 {
		p.cps = float32(d.cost / float64(d.costOK))
	}
}
