package selfimprove

import (
	"fmt"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// routeDoc is an agent's routeState as stored (docs/format.md).
type routeDoc struct {
	// Home is the route to return to, present while Away.
	Home      string       `json:"home,omitempty"`
	Away      bool         `json:"away,omitempty"`
	ProbeAt   time.Time    `json:"probe_at,omitzero"`
	Every     jsonDuration `json:"every,omitempty"`
	Returning bool         `json:"returning,omitempty"`
	Dead      []deadDoc    `json:"dead,omitempty"`
	Hold      string       `json:"hold,omitempty"`
	// HoldCluster is 16 hex digits.
	HoldCluster string       `json:"hold_cluster,omitempty"`
	HoldEvery   jsonDuration `json:"hold_every,omitempty"`
	Run         int          `json:"run,omitempty"`
	Strikes     int          `json:"strikes,omitempty"`
	// Failed and Good count the returns rolled back and the good probes
	// in a row (routeState).
	Failed int `json:"returns_failed,omitempty"`
	Good   int `json:"good_probes,omitempty"`
}

// ladderDoc is the route ladder in force for an agent when its state was
// saved (Loop.Routes), recorded for readers; the Loop that runs the agent
// takes its ladder from its options, never from here.
type ladderDoc struct {
	Primary   string            `json:"primary,omitempty"`
	Fallbacks []string          `json:"fallbacks,omitempty"`
	Models    map[string]string `json:"models,omitempty"`
}

// ladderOf returns r as stored; nil for none.
func ladderOf(r *Routes) *ladderDoc {
	if r == nil || r.Off || r.Primary == "" && len(r.Fallbacks) == 0 && len(r.Models) == 0 {
		return nil
	}
	return &ladderDoc{Primary: r.Primary, Fallbacks: r.Fallbacks, Models: r.Models}
}

// routes returns d as a Routes, checked as SetRoutes checks one.
func (d *ladderDoc) routes() (Routes, error) {
	r := Routes{Primary: d.Primary, Fallbacks: d.Fallbacks, Models: d.Models}
	if err := r.validate(); err != nil {
		return Routes{}, fmt.Errorf("ladder: %w", err)
	}
	return r, nil
}

// deadDoc is a dead route as stored.
type deadDoc struct {
	Route string    `json:"route"`
	Until time.Time `json:"until"`
	Why   string    `json:"why,omitempty"`
}

// doc returns r as stored, nil when it is empty.
func (r *routeState) doc() (*routeDoc, error) {
	if r == nil || !r.Away && !r.Returning && len(r.Dead) == 0 && r.Hold == "" && r.Run == 0 && r.Strikes == 0 {
		return nil, nil
	}
	d := &routeDoc{Home: r.Home, Away: r.Away, Every: jsonDuration(r.Every), Returning: r.Returning,
		Hold: string(r.Hold), HoldEvery: jsonDuration(r.HoldEvery), Run: r.Run, Strikes: r.Strikes,
		Failed: r.Failed, Good: r.Good}
	var err error
	if d.ProbeAt, err = optTimeToDoc(path("route.probe_at"), min(r.ProbeAt, maxNanos-1)); err != nil {
		return nil, err
	}
	if r.HoldCluster != 0 {
		d.HoldCluster = failure.FormatClusterID(r.HoldCluster)
	}
	for i, x := range r.Dead {
		t, err := timeToDoc(elem("route.dead", i).dot("until"), min(x.Until, maxNanos-1))
		if err != nil {
			return nil, err
		}
		d.Dead = append(d.Dead, deadDoc{Route: x.Route, Until: t, Why: x.Why})
	}
	return d, nil
}

// route checks a stored routeDoc: bounded lists and strings, times and
// durations in range, a known hold class.
func (c *checker) route(d *routeDoc) *routeState {
	r := &routeState{Home: d.Home, Away: d.Away, Returning: d.Returning, Run: int(c.num(path("route.run"), int64(d.Run), 0, maxCount)),
		Strikes: int(c.num(path("route.strikes"), int64(d.Strikes), 0, maxCount)),
		Failed:  int(c.num(path("route.returns_failed"), int64(d.Failed), 0, maxReturnProbes)),
		Good:    int(c.num(path("route.good_probes"), int64(d.Good), 0, maxReturnProbes))}
	if len(d.Home) > maxRouteLen {
		c.fail("route.home: %d bytes, at most %d", len(d.Home), maxRouteLen)
	}
	r.ProbeAt = c.optTime(path("route.probe_at"), d.ProbeAt)
	r.Every = c.num(path("route.every"), int64(d.Every), 0, int64(maxWindow))
	r.HoldEvery = c.num(path("route.hold_every"), int64(d.HoldEvery), 0, int64(maxWindow))
	switch failure.Class(d.Hold) {
	case "", failure.ClassQuota, failure.ClassAuth:
		r.Hold = failure.Class(d.Hold)
	default:
		c.fail("route.hold: class %q is not held", d.Hold)
	}
	if d.HoldCluster != "" {
		id, err := failure.ParseClusterID(d.HoldCluster)
		if err != nil {
			c.fail("route.hold_cluster: %v", err)
		}
		r.HoldCluster = id
	}
	if len(d.Dead) > maxAgentDead {
		c.fail("route.dead: %d routes, at most %d", len(d.Dead), maxAgentDead)
		return r
	}
	for i, x := range d.Dead {
		if len(x.Route) > maxRouteLen || len(x.Why) > maxReason {
			c.fail("%s: route or reason too long", elem("route.dead", i))
		}
		r.Dead = append(r.Dead, routeDead{Route: x.Route, Until: c.time(elem("route.dead", i).dot("until"), x.Until), Why: x.Why})
	}
	return r
}
