package admin

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/calltotals"
)

// otherAgents is the agent label value of the agents beyond
// Options.MaxAgentSeries.
const otherAgents = calltotals.Other

// metrics serves GET /metrics in the Prometheus text exposition format
// 0.0.4. The per-agent series cover the agents in memory, the first
// Options.MaxAgentSeries by ID; the others are summed under
// agent="_other". Their counters are s.totals' running totals, which
// never go down.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	writeMetrics(bw, s.l, s.o.MaxAgentSeries, s.totals)
	s.intakeMetrics(&encoder{w: bw})
	bw.Flush()
}

// intakeMetrics writes the handler's own families: the intake's caps,
// what it booked, created and refused, and the timelines kept.
func (s *server) intakeMetrics(e *encoder) {
	s.samples.mu.Lock()
	timelines := len(s.samples.agents)
	s.samples.mu.Unlock()
	e.family("selfimprove_intake_outcome_rate", "gauge", "Outcomes and scores the intake books a second over all agents (admin.Options.OutcomeRate).")
	e.w.WriteString("selfimprove_intake_outcome_rate ")
	e.buf = strconv.AppendFloat(e.buf[:0], s.o.OutcomeRate, 'g', -1, 64)
	e.w.Write(e.buf)
	e.w.WriteByte('\n')
	e.families([]family{
		{"selfimprove_intake_new_agents_per_minute", "gauge", "Agents each token may create through the intake a minute, in bursts of as many (admin.Options.IntakeNewAgents).", int64(s.o.IntakeNewAgents)},
		{"selfimprove_intake_outcomes_total", "counter", "Outcomes the intake booked.", s.lim.booked.Load()},
		{"selfimprove_intake_scores_total", "counter", "Scores POST /api/agents/{agent}/score booked.", s.lim.scored.Load()},
		{"selfimprove_intake_new_agents_total", "counter", "Agents the intake created (agents the loop did not know when their batch was booked).", s.lim.created.Load()},
		{"selfimprove_timelines", "gauge", "Agents with a timeline in this handler.", int64(timelines)},
		{"selfimprove_timelines_max", "gauge", "Agents with a timeline at most (admin.Options.MaxTimelines).", int64(s.o.MaxTimelines)},
	})
	e.family("selfimprove_intake_refused_total", "counter", "Requests of the intake and of scores refused, by reason: invalid (400, 413), not_allowed (403: an agent the token may not act for), outcome_rate (429: admin.Options.OutcomeRate), new_agents (429: admin.Options.IntakeNewAgents).")
	for i, name := range refusalNames {
		e.sample("selfimprove_intake_refused_total", false, "", "reason", name, s.lim.refused[i].Load())
	}
}

// series is one agent's series: its label value and counters.
type series struct {
	label string
	m     *selfimprove.AgentView // zero for _other
	tot   []int64                // the running totals of its counters (metrics_totals.go)
	open  int64                  // agents with an open or half-open circuit
	n     int64                  // agents summed (for _other)
}

// WriteMetrics writes l's metrics to w in the Prometheus text exposition
// format 0.0.4, with per-agent series for at most maxAgents agents (the
// first by ID; default 1,000 when 0 or less) and the others summed under
// agent="_other". It is what GET /metrics serves, but for one thing: its
// counters (selfimprove_calls_total and the histograms) are read from the
// agents' own counts, which start again from zero when an agent is evicted
// and loaded again, while GET /metrics keeps running totals that never go
// down.
func WriteMetrics(w *bufio.Writer, l *selfimprove.Loop, maxAgents int) {
	if maxAgents <= 0 {
		maxAgents = 1000
	}
	writeMetrics(w, l, maxAgents, nil)
}

// writeMetrics is WriteMetrics with the running totals t (maxAgents > 0;
// nil t: the agents' own counts).
func writeMetrics(w *bufio.Writer, l *selfimprove.Loop, maxAgents int, t *calltotals.Totals) {
	agents, aggregated := agentSeries(l, maxAgents, t)
	for i := range agents {
		// The quality figures are read under the agent's lock: one short
		// lock an agent a scrape.
		if a := &agents[i]; a.label != otherAgents {
			a.m.Stats = l.Stats(a.m.AgentID)
		}
	}
	e := encoder{w: w}
	e.agentMetrics(agents, aggregated)
	e.loopMetrics(l.Metrics())
}

// agentSeries returns a series for each of the first maxAgents of l's
// agents in memory, in ID order, then, if any are left, one that sums them
// under agent="_other" (an agent whose label is "_other", or repeats an
// earlier agent's, is summed too). It also returns how many were summed.
// The series' counters are the running totals of t (nil: the sums of the
// agents' own counts).
func agentSeries(l *selfimprove.Loop, maxAgents int, t *calltotals.Totals) ([]series, int64) {
	if t != nil {
		// The views are read under t's lock: a scrape that read them
		// before another booked its own would book lower counts after it,
		// taken for a reload, and count them again.
		t.Begin()
		defer t.End()
	}
	all := sortedViews(l)
	agents := make([]series, 0, min(len(all), maxAgents)+1)
	// The counts of one agent, then the per-agent series' totals.
	tots := make([]int64, cap(agents)*countersWidth)
	cur, tots := tots[:countersWidth], tots[countersWidth:]
	other := series{label: otherAgents, m: new(selfimprove.AgentView), tot: make([]int64, countersWidth)}
	seen := make(map[string]struct{}, min(len(all), maxAgents))
	for _, m := range all {
		counters(cur, m)
		open := int64(0)
		if m.Circuit != selfimprove.CircuitClosed {
			open = 1
		}
		label := labelValue(m.AgentID)
		_, dup := seen[label]
		own := len(agents) < maxAgents && !dup && label != otherAgents
		if !own {
			label = otherAgents
		}
		tot := cur
		if t != nil {
			tot = t.Add(label, m.AgentID, cur)
		}
		switch {
		case own:
			seen[label] = struct{}{}
			a := series{label: label, m: m, n: 1, open: open, tot: tots[:countersWidth:countersWidth]}
			tots = tots[countersWidth:]
			copy(a.tot, tot)
			agents = append(agents, a)
		case t != nil: // the running total
			other.n, other.open = other.n+1, other.open+open
			copy(other.tot, tot)
		default: // the sum
			other.n, other.open = other.n+1, other.open+open
			for k, v := range tot {
				other.tot[k] += v
			}
		}
	}
	if other.n > 0 {
		agents = append(agents, other)
	}
	if t != nil {
		// The totals of up to maxAgents series whose agents left memory
		// are kept, not written (a Prometheus series may be absent from a
		// scrape): an agent loaded again goes on from its total.
		t.Absent(maxAgents, nil)
	}
	return agents, other.n
}

// agentMetrics writes the per-agent families, and the count of agents
// summed under agent="_other".
func (e *encoder) agentMetrics(agents []series, aggregated int64) {
	e.family("selfimprove_calls_total", "counter", "Calls by agent and outcome in this process (ignored: cancelled by the caller).")
	for i := range agents {
		a := &agents[i]
		e.sample("selfimprove_calls_total", true, a.label, "outcome", "success", a.tot[0])
		e.sample("selfimprove_calls_total", true, a.label, "outcome", "failure", a.tot[1])
		e.sample("selfimprove_calls_total", true, a.label, "outcome", "ignored", a.tot[2])
	}
	e.histogram(agents, "selfimprove_call_duration_seconds", "Duration of the counted calls (every attempt and the waits between), by agent.", false, latencyAt)
	e.histogram(agents, "selfimprove_first_token_seconds", "Time to first token of the attempts whose stream reported one (Config.FirstTokenTimeout set), by agent that has any.", true, firstTokenAt)
	e.family("selfimprove_config_version", "gauge", "Version of the config in force, by agent (not for _other).")
	for i := range agents {
		if a := &agents[i]; a.label != otherAgents {
			e.sample("selfimprove_config_version", true, a.label, "", "", int64(a.m.Config.Version))
		}
	}
	e.qualityMetrics(agents)
	e.family("selfimprove_circuit_open", "gauge", "1 when the agent's circuit breaker is open or half-open, else 0 (for _other: how many are).")
	for i := range agents {
		e.sample("selfimprove_circuit_open", true, agents[i].label, "", "", agents[i].open)
	}
	e.family("selfimprove_agents_aggregated", "gauge", "Agents in memory whose series are summed under agent=\"_other\".")
	e.sample("selfimprove_agents_aggregated", false, "", "", "", aggregated)
}

// histogram writes the histogram family name of each agent, the one of
// its counters at offset at (histCounters' layout; its buckets are
// LatencyBuckets); sparse: only of the agents whose histogram counts
// something.
func (e *encoder) histogram(agents []series, name, help string, sparse bool, at int) {
	e.family(name, "histogram", help)
	les := make([]string, len(latencyBounds))
	for i, b := range latencyBounds {
		les[i] = strconv.FormatFloat(b.Seconds(), 'g', -1, 64)
	}
	n := len(les) + 1
	for i := range agents {
		a := &agents[i]
		h := a.tot[at : at+histWidth]
		if sparse && h[n] == 0 {
			continue
		}
		var cum int64
		for j := range n {
			cum += h[j]
			le := "+Inf"
			if j < len(les) {
				le = les[j]
			}
			e.sample(name+"_bucket", true, a.label, "le", le, cum)
		}
		e.float(name+"_sum", a.label, time.Duration(h[n+1]).Seconds())
		e.sample(name+"_count", true, a.label, "", "", h[n])
	}
}

// family is a family of one unlabelled sample.
type family struct {
	name, typ, help string
	v               int64
}

// families writes families of one unlabelled sample each.
func (e *encoder) families(fs []family) {
	for _, c := range fs {
		e.family(c.name, c.typ, c.help)
		e.sample(c.name, false, "", "", "", c.v)
	}
}

// loopMetrics writes the loop-wide families.
func (e *encoder) loopMetrics(m selfimprove.Metrics) {
	e.family("selfimprove_changes_total", "counter", "Config changes applied, confirmed and rolled back since the loop started.")
	e.sample("selfimprove_changes_total", false, "", "result", "applied", m.Improvements)
	e.sample("selfimprove_changes_total", false, "", "result", "confirmed", m.Confirmations)
	e.sample("selfimprove_changes_total", false, "", "result", "rolled_back", m.Rollbacks)
	e.families([]family{
		{"selfimprove_strategy_runs_total", "counter", "Strategy runs.", m.StrategyRuns},
		{"selfimprove_strategy_errors_total", "counter", "Strategy runs that failed (errors, panics, timeouts).", m.StrategyErrors},
		{"selfimprove_rejected_tweaks_total", "counter", "Tweaks the loop refused to apply.", m.RejectedTweaks},
		{"selfimprove_store_errors_total", "counter", "Failed reads and writes of the store.", m.StoreErrors},
		{"selfimprove_notify_delivered_total", "counter", "Deliveries made: an event taken by one notifier (an event sent to 3 notifiers counts 3).", m.Notified},
		{"selfimprove_notify_failures_total", "counter", "Failed notifier deliveries, panics included.", m.NotifyErrors},
		{"selfimprove_notify_dropped_total", "counter", "Events dropped because the notifier queue was full or closed.", m.NotifyDropped},
		{"selfimprove_traces_total", "counter", "Traces written.", m.Traces},
		{"selfimprove_traces_dropped_total", "counter", "Traces lost.", m.TracesDropped},
		{"selfimprove_agents_loaded", "gauge", "Agents in memory.", m.Agents},
		{"selfimprove_agent_loads_total", "counter", "Agents loaded from the store.", m.Loads},
		{"selfimprove_agent_evictions_total", "counter", "Idle agents evicted from memory.", m.Evictions},
	})
	if m.FleetReplica != "" {
		e.fleetMetrics(m)
	}
}

// fleetMetrics writes the fleet's families (a Loop with WithFleet).
func (e *encoder) fleetMetrics(m selfimprove.Metrics) {
	e.families([]family{
		{"selfimprove_fleet_up", "gauge", "1 while the fleet answers, 0 while this replica cannot reach it and backs off.", 1 - m.FleetDown},
		{"selfimprove_fleet_outages_total", "counter", "Outages of the fleet seen by this replica (one unreachable and one recovered event each).", m.FleetOutages},
		{"selfimprove_fleet_errors_total", "counter", "Failed operations on the fleet (unreachable, refused, invalid data).", m.FleetErrors},
		{"selfimprove_fleet_conflicts_total", "counter", "Decisions another replica committed first.", m.FleetConflicts},
		{"selfimprove_fleet_revision_lag", "gauge", "Most revisions an agent's copy was behind the fleet's at the latest flush (0: in step).", m.FleetLag},
		{"selfimprove_fleet_replicas", "gauge", "Replicas of the fleet seen alive, this one among them (each tells the fleet every 5 s; gone when closed or 20 s unseen).", m.FleetReplicas},
		{"selfimprove_fleet_behind_total", "counter", "Times a flush found an agent's copy behind the fleet's (a commit announced late or lost).", m.FleetBehind},
	})
	e.family("selfimprove_fleet_commit_seconds", "summary", "Time commits of decisions to the fleet took (won or lost).")
	e.w.WriteString("selfimprove_fleet_commit_seconds_sum ")
	e.buf = strconv.AppendFloat(e.buf[:0], float64(m.FleetCommitNS)/1e9, 'g', -1, 64)
	e.w.Write(e.buf)
	e.w.WriteByte('\n')
	e.sample("selfimprove_fleet_commit_seconds_count", false, "", "", "", m.FleetCommits)
	e.family("selfimprove_fleet_commit_max_seconds", "gauge", "The slowest commit to the fleet since the loop started.")
	e.w.WriteString("selfimprove_fleet_commit_max_seconds ")
	e.buf = strconv.AppendFloat(e.buf[:0], float64(m.FleetCommitMaxNS)/1e9, 'g', -1, 64)
	e.w.Write(e.buf)
	e.w.WriteByte('\n')
	e.family("selfimprove_fleet_leases_total", "counter", "Leases a strategy run asked for, by result: taken, busy (another replica held it), error.")
	e.sample("selfimprove_fleet_leases_total", false, "", "result", "taken", m.FleetLeases)
	e.sample("selfimprove_fleet_leases_total", false, "", "result", "busy", m.FleetLeasesBusy)
	e.sample("selfimprove_fleet_leases_total", false, "", "result", "error", m.FleetLeaseErrors)
}

// labelValue maps an agent ID to a label value: valid UTF-8 (each byte
// that is not is written as \xNN).
func labelValue(id string) string {
	if utf8.ValidString(id) {
		return id
	}
	var b strings.Builder
	for i := 0; i < len(id); {
		r, n := utf8.DecodeRuneInString(id[i:])
		if r == utf8.RuneError && n == 1 {
			const hex = "0123456789ABCDEF"
			b.WriteString(`\x`)
			b.WriteByte(hex[id[i]>>4])
			b.WriteByte(hex[id[i]&15])
		} else {
			b.WriteString(id[i : i+n])
		}
		i += n
	}
	return b.String()
}

// encoder writes samples in the text format.
type encoder struct {
	w   *bufio.Writer
	buf []byte
}

// family writes the HELP and TYPE lines of a metric family.
func (e *encoder) family(name, typ, help string) {
	e.w.WriteString("# HELP ")
	e.w.WriteString(name)
	e.w.WriteByte(' ')
	e.w.WriteString(help) // constant text: no \ or newline
	e.w.WriteString("\n# TYPE ")
	e.w.WriteString(name)
	e.w.WriteByte(' ')
	e.w.WriteString(typ)
	e.w.WriteByte('\n')
}

// labels writes {agent="…",k="v"} (either may be absent).
func (e *encoder) labels(agent, k, v string, hasAgent bool) {
	if !hasAgent && k == "" {
		return
	}
	e.w.WriteByte('{')
	if hasAgent {
		e.w.WriteString(`agent="`)
		escapeLabel(e.w, agent)
		e.w.WriteByte('"')
		if k != "" {
			e.w.WriteByte(',')
		}
	}
	if k != "" {
		e.w.WriteString(k)
		e.w.WriteString(`="`)
		escapeLabel(e.w, v)
		e.w.WriteByte('"')
	}
	e.w.WriteByte('}')
}

// sample writes one integer sample, with an agent label if hasAgent and
// a label k="v" if k is not empty.
func (e *encoder) sample(name string, hasAgent bool, agent, k, v string, n int64) {
	e.w.WriteString(name)
	e.labels(agent, k, v, hasAgent)
	e.w.WriteByte(' ')
	e.buf = strconv.AppendInt(e.buf[:0], n, 10)
	e.w.Write(e.buf)
	e.w.WriteByte('\n')
}

// float writes one float sample with an agent label.
func (e *encoder) float(name, agent string, f float64) {
	e.w.WriteString(name)
	e.labels(agent, "", "", true)
	e.w.WriteByte(' ')
	e.buf = strconv.AppendFloat(e.buf[:0], f, 'g', -1, 64)
	e.w.Write(e.buf)
	e.w.WriteByte('\n')
}

// escapeLabel writes a label value with \, " and newline escaped.
func escapeLabel(w *bufio.Writer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			w.WriteString(`\\`)
		case '"':
			w.WriteString(`\"`)
		case '\n':
			w.WriteString(`\n`)
		default:
			w.WriteByte(c)
		}
	}
}

// sortedViews returns the views of l's agents in memory (Loop.Views), by
// ID. They are sorted through pointers: an AgentView is too large to move
// cheaply ten thousand times.
func sortedViews(l *selfimprove.Loop) []*selfimprove.AgentView {
	views := make([]selfimprove.AgentView, 0, l.Metrics().Agents+16)
	for v := range l.Views() {
		views = append(views, v)
	}
	all := make([]*selfimprove.AgentView, len(views))
	for i := range views {
		all[i] = &views[i]
	}
	slices.SortFunc(all, func(a, b *selfimprove.AgentView) int { return strings.Compare(a.AgentID, b.AgentID) })
	return all
}

// qualityMetrics writes the quality and cost of the config in force, by
// agent that has any (not for _other).
func (e *encoder) qualityMetrics(agents []series) {
	e.family("selfimprove_quality_scored", "gauge", "Calls scored under the config in force, by agent that has any.")
	for i := range agents {
		if a := &agents[i]; a.label != otherAgents && a.m.Stats.Scored > 0 {
			e.sample("selfimprove_quality_scored", true, a.label, "", "", int64(a.m.Stats.Scored))
		}
	}
	e.family("selfimprove_quality_mean", "gauge", "Mean score (0 to 1) of the calls scored under the config in force, by agent that has any.")
	for i := range agents {
		if a := &agents[i]; a.label != otherAgents && a.m.Stats.Scored > 0 {
			e.float("selfimprove_quality_mean", a.label, a.m.Stats.Quality)
		}
	}
	e.family("selfimprove_cost_per_success", "gauge", "Mean cost (AddCost's unit) per successful call under the config in force, by agent that has any.")
	for i := range agents {
		if a := &agents[i]; a.label != otherAgents && a.m.Stats.CostPerSuccess > 0 {
			e.float("selfimprove_cost_per_success", a.label, a.m.Stats.CostPerSuccess)
		}
	}
}
