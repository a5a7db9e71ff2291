// Package otel bridges a selfimprove Loop to OpenTelemetry: the loop's
// metrics as instruments of a metric.MeterProvider (RegisterMetrics), and
// a span per wrapped call under the caller's span (Wrap).
package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/calltotals"

	si "github.com/self-improving-loop/selfimprove"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/self-improving-loop/selfimprove/otel"

// otherAgents is the agent attribute of the agents beyond MaxAgentSeries.
const otherAgents = calltotals.Other

// DefaultMaxAgentSeries is the default of Options.MaxAgentSeries: 600.
// The OpenTelemetry SDK keeps at most 2,000 series an instrument by
// default (sdkmetric.WithCardinalityLimit) and merges the rest into one
// series without attributes; selfimprove.calls has 3 series an agent (one
// an outcome), so 600 agents and _other make 1,803 of them, which fit.
// admin's /metrics, which has no such limit, keeps 1,000 by default.
const DefaultMaxAgentSeries = 600

// Options configures RegisterMetrics and WrapWith.
type Options struct {
	// MaxAgentSeries bounds the agents with their own agent attribute; the
	// others are summed under agent="_other". RegisterMetrics keeps the
	// first ones by ID among the agents in memory; the duration histogram
	// of WrapWith keeps the first ones whose calls it records, for the
	// life of the Loop it returns. Default DefaultMaxAgentSeries (600).
	// Above 665, raise the SDK's cardinality limit to more than
	// 3×MaxAgentSeries+3 too, or selfimprove.calls overflows it.
	// selfimprove.calls counts each series' calls in this process and
	// never goes down, though an agent's own counts start again from zero
	// when it is evicted and loaded again: the series of an agent that
	// went from memory is still observed, at its total, while the series
	// of the agents in memory leave room for it under MaxAgentSeries (the
	// most recently seen first; the others start again from zero, which
	// a delta exporter reads right). The calls of an agent evicted before
	// a collection sees them are not counted.
	MaxAgentSeries int
}

// maxAgents returns o.MaxAgentSeries, or its default.
func (o Options) maxAgents() int {
	if o.MaxAgentSeries <= 0 {
		return DefaultMaxAgentSeries
	}
	return o.MaxAgentSeries
}

// RegisterMetrics registers observable instruments reading l on a meter
// of mp: the same numbers as the admin package's /metrics.
//
//	selfimprove.calls            counter  {agent, outcome=success|failure|ignored}
//	                             the calls in this process: monotonic across evictions
//	                             (see Options.MaxAgentSeries)
//	selfimprove.config.version   gauge    {agent}
//	selfimprove.circuit.open     gauge    {agent}  1 open or half-open, else 0
//	selfimprove.changes          counter  {result=applied|confirmed|rolled_back}
//	selfimprove.quality.scored, .quality.mean, selfimprove.cost.per_success  gauges {agent}
//	                             of the config in force, for the agents that have any
//	selfimprove.notify.delivered, .failures, .dropped; selfimprove.store.errors;
//	selfimprove.agents.loaded (gauge), selfimprove.agent.loads, selfimprove.agent.evictions  counters
//	selfimprove.strategy.runs, .strategy.errors; selfimprove.tweaks.rejected;
//	selfimprove.traces.written, .traces.dropped  counters
//	selfimprove.fleet.up, .commit.max (seconds, float), .revision.lag  gauges; selfimprove.fleet.outages, .errors,
//	.conflicts, .commits, .commit.time (seconds, float), .leases.taken, .leases.busy, .leases.errors, .behind  counters
//
// Call latency is a histogram, which OpenTelemetry cannot observe: Wrap
// records it (selfimprove.call.duration) for the calls the loop counts
// (see Execute).
// Unregister the returned Registration to stop.
func RegisterMetrics(l *si.Loop, mp metric.MeterProvider, opts Options) (metric.Registration, error) {
	opts.MaxAgentSeries = opts.maxAgents()
	m := mp.Meter(ScopeName)
	in, err := newInstruments(m)
	if err != nil {
		return nil, err
	}
	in.totals = calltotals.New(len(callCounts{}))
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		in.observeAgents(o, l, opts.MaxAgentSeries)
		in.observeLoop(o, l.Metrics())
		return nil
	}, in.observables()...)
}

// loopCounter is a loop-wide instrument without attributes: a counter, or
// a gauge, and how to read it from the loop's Metrics.
type loopCounter struct {
	name, help string
	gauge      bool
	get        func(si.Metrics) int64
}

// loopCounters are the instruments of RegisterMetrics without attributes.
var loopCounters = []loopCounter{
	{"selfimprove.notify.delivered", "Deliveries made: an event taken by one notifier (an event sent to 3 notifiers counts 3).", false, func(m si.Metrics) int64 { return m.Notified }},
	{"selfimprove.notify.failures", "Failed notifier deliveries, panics included.", false, func(m si.Metrics) int64 { return m.NotifyErrors }},
	{"selfimprove.notify.dropped", "Events dropped because the notifier queue was full or closed.", false, func(m si.Metrics) int64 { return m.NotifyDropped }},
	{"selfimprove.store.errors", "Failed reads and writes of the store.", false, func(m si.Metrics) int64 { return m.StoreErrors }},
	{"selfimprove.agent.loads", "Agents loaded from the store.", false, func(m si.Metrics) int64 { return m.Loads }},
	{"selfimprove.agent.evictions", "Idle agents evicted from memory.", false, func(m si.Metrics) int64 { return m.Evictions }},
	{"selfimprove.agents.loaded", "Agents in memory.", true, func(m si.Metrics) int64 { return m.Agents }},
	{"selfimprove.strategy.runs", "Strategy runs.", false, func(m si.Metrics) int64 { return m.StrategyRuns }},
	{"selfimprove.strategy.errors", "Strategy runs that failed (errors, panics, timeouts).", false, func(m si.Metrics) int64 { return m.StrategyErrors }},
	{"selfimprove.tweaks.rejected", "Tweaks the loop refused to apply.", false, func(m si.Metrics) int64 { return m.RejectedTweaks }},
	{"selfimprove.traces.written", "Traces written to the trace log.", false, func(m si.Metrics) int64 { return m.Traces }},
	{"selfimprove.traces.dropped", "Traces lost (see WithTraceQueue).", false, func(m si.Metrics) int64 { return m.TracesDropped }},
	// The fleet (WithFleet); 0 without one.
	{"selfimprove.fleet.up", "1 while the fleet answers, 0 while this replica cannot reach it (or has no fleet).", true, func(m si.Metrics) int64 {
		if m.FleetReplica == "" {
			return 0
		}
		return 1 - m.FleetDown
	}},
	{"selfimprove.fleet.outages", "Outages of the fleet seen by this replica.", false, func(m si.Metrics) int64 { return m.FleetOutages }},
	{"selfimprove.fleet.errors", "Failed operations on the fleet.", false, func(m si.Metrics) int64 { return m.FleetErrors }},
	{"selfimprove.fleet.conflicts", "Decisions another replica committed first.", false, func(m si.Metrics) int64 { return m.FleetConflicts }},
	{"selfimprove.fleet.commits", "Commits of decisions to the fleet.", false, func(m si.Metrics) int64 { return m.FleetCommits }},
	{"selfimprove.fleet.leases.taken", "Leases a strategy run took.", false, func(m si.Metrics) int64 { return m.FleetLeases }},
	{"selfimprove.fleet.leases.busy", "Leases another replica held.", false, func(m si.Metrics) int64 { return m.FleetLeasesBusy }},
	{"selfimprove.fleet.leases.errors", "Lease requests that failed.", false, func(m si.Metrics) int64 { return m.FleetLeaseErrors }},
	{"selfimprove.fleet.revision.lag", "Most revisions an agent's copy was behind the fleet's at the latest flush.", true, func(m si.Metrics) int64 { return m.FleetLag }},
	{"selfimprove.fleet.replicas", "Replicas of the fleet seen alive, this one among them.", true, func(m si.Metrics) int64 { return m.FleetReplicas }},
	{"selfimprove.fleet.behind", "Times a flush found an agent's copy behind the fleet's.", false, func(m si.Metrics) int64 { return m.FleetBehind }},
}

// instruments are the observable instruments of RegisterMetrics.
type instruments struct {
	calls   metric.Int64ObservableCounter
	version metric.Int64ObservableGauge
	circuit metric.Int64ObservableGauge
	changes metric.Int64ObservableCounter
	loop    []metric.Int64Observable // one for each of loopCounters
	// The quality and cost of the config in force, by agent that has
	// any (see docs/quality.md), as /metrics exports them.
	scored      metric.Int64ObservableGauge
	qualityMean metric.Float64ObservableGauge
	costPer     metric.Float64ObservableGauge
	// The time the commits to the fleet took, in seconds.
	commitTime metric.Float64ObservableCounter
	commitMax  metric.Float64ObservableGauge
	totals     *calltotals.Totals // keep calls monotonic
}

// newInstruments creates the instruments on m.
func newInstruments(m metric.Meter) (*instruments, error) {
	var in instruments
	var err error
	in.calls, err = m.Int64ObservableCounter("selfimprove.calls", metric.WithDescription("Calls by agent and outcome in this process (its own series while the agent has one, else _other)."), metric.WithUnit("{call}"))
	if err != nil {
		return nil, err
	}
	in.version, err = m.Int64ObservableGauge("selfimprove.config.version", metric.WithDescription("Version of the config in force, by agent."))
	if err != nil {
		return nil, err
	}
	in.circuit, err = m.Int64ObservableGauge("selfimprove.circuit.open", metric.WithDescription("1 when the agent's circuit breaker is open or half-open, else 0 (for _other: how many are)."))
	if err != nil {
		return nil, err
	}
	in.changes, err = m.Int64ObservableCounter("selfimprove.changes", metric.WithDescription("Config changes applied, confirmed and rolled back."))
	if err != nil {
		return nil, err
	}
	if err := in.newQuality(m); err != nil {
		return nil, err
	}
	in.loop = make([]metric.Int64Observable, len(loopCounters))
	for i, c := range loopCounters {
		if c.gauge {
			in.loop[i], err = m.Int64ObservableGauge(c.name, metric.WithDescription(c.help))
		} else {
			in.loop[i], err = m.Int64ObservableCounter(c.name, metric.WithDescription(c.help))
		}
		if err != nil {
			return nil, err
		}
	}
	return &in, nil
}

// observables returns every instrument, for RegisterCallback.
func (in *instruments) observables() []metric.Observable {
	obs := []metric.Observable{in.calls, in.version, in.circuit, in.changes, in.scored, in.qualityMean, in.costPer, in.commitTime, in.commitMax}
	for _, inst := range in.loop {
		obs = append(obs, inst)
	}
	return obs
}

// observeAgents observes the calls, config version and circuit of each of
// the first maxAgents of l's agents by ID, and the calls and open circuits
// of the others summed under agent="_other" (an agent whose ID is "_other",
// or whose attribute repeats an earlier agent's, is summed too: IDs that
// are not UTF-8 and differ only in their invalid bytes). The calls are
// the running totals of in.totals, which never go down; a series whose
// agent left memory stays, at its total, while there is room for it (a
// delta exporter would take a series left out and back for new calls).
func (in *instruments) observeAgents(o metric.Observer, l *si.Loop, maxAgents int) {
	// The views are read under the totals' lock: a collection that read
	// them before another booked its own would book lower counts after
	// it, taken for a reload, and count them again.
	in.totals.Begin()
	defer in.totals.End()
	all := sortedViews(l)
	var other callCounts
	var otherOpen, otherN int64
	seen := make(map[string]struct{}, min(len(all), maxAgents))
	for _, a := range all {
		open := int64(0)
		if a.Circuit != si.CircuitClosed {
			open = 1
		}
		label := strings.ToValidUTF8(a.AgentID, "\uFFFD")
		if _, dup := seen[label]; dup || len(seen) >= maxAgents || label == otherAgents {
			other = in.addCalls(otherAgents, a)
			otherOpen += open
			otherN++
			continue
		}
		seen[label] = struct{}{}
		agent := attribute.String("agent", label)
		in.observeCalls(o, agent, in.addCalls(label, a))
		o.ObserveInt64(in.version, int64(a.Config.Version), metric.WithAttributes(agent))
		o.ObserveInt64(in.circuit, open, metric.WithAttributes(agent))
		// Read under the agent's lock: one short lock an agent a
		// collection, as /metrics does.
		in.observeQuality(o, agent, l.Stats(a.AgentID))
	}
	if otherN > 0 {
		agent := attribute.String("agent", otherAgents)
		in.observeCalls(o, agent, other)
		o.ObserveInt64(in.circuit, otherOpen, metric.WithAttributes(agent))
	}
	// The series no agent in memory has now, at their totals, within the
	// room the agents' own series leave under maxAgents.
	in.totals.Absent(maxAgents-len(seen), func(label string, n []int64) {
		in.observeCalls(o, attribute.String("agent", label), callCounts(n))
	})
}

// callCounts are calls by outcome: success, failure, ignored.
type callCounts [3]int64

// addCalls books a's calls to the series label of in.totals, and returns
// the series' running totals.
func (in *instruments) addCalls(label string, a *si.AgentView) callCounts {
	return callCounts(in.totals.Add(label, a.AgentID, []int64{a.Successes, a.Failures, a.Ignored}))
}

// observeCalls observes calls by outcome with the agent attribute.
func (in *instruments) observeCalls(o metric.Observer, agent attribute.KeyValue, n callCounts) {
	outcome := func(v string) attribute.KeyValue { return attribute.String("outcome", v) }
	o.ObserveInt64(in.calls, n[0], metric.WithAttributes(agent, outcome("success")))
	o.ObserveInt64(in.calls, n[1], metric.WithAttributes(agent, outcome("failure")))
	o.ObserveInt64(in.calls, n[2], metric.WithAttributes(agent, outcome("ignored")))
}

// observeLoop observes the loop-wide instruments from lm.
func (in *instruments) observeLoop(o metric.Observer, lm si.Metrics) {
	result := func(r string) metric.ObserveOption {
		return metric.WithAttributes(attribute.String("result", r))
	}
	o.ObserveInt64(in.changes, lm.Improvements, result("applied"))
	o.ObserveInt64(in.changes, lm.Confirmations, result("confirmed"))
	o.ObserveInt64(in.changes, lm.Rollbacks, result("rolled_back"))
	for i, c := range loopCounters {
		o.ObserveInt64(in.loop[i], c.get(lm))
	}
	o.ObserveFloat64(in.commitTime, float64(lm.FleetCommitNS)/1e9)
	o.ObserveFloat64(in.commitMax, float64(lm.FleetCommitMaxNS)/1e9)
}

// Loop runs calls of a selfimprove Loop, each in a span and timed in a
// histogram.
type Loop struct {
	l        *si.Loop
	tracer   trace.Tracer
	duration metric.Float64Histogram
	series   *agentSeries // the histogram's series; nil without it
}

// Wrap returns l with tracing from tp and the call-duration histogram on
// mp (either may be nil: the global providers of go.opentelemetry.io/otel
// are not used; a nil one turns its part off). It is WrapWith with the
// default Options (600 agents with their own duration series).
func Wrap(l *si.Loop, tp trace.TracerProvider, mp metric.MeterProvider) (*Loop, error) {
	return WrapWith(l, tp, mp, Options{})
}

// WrapWith is Wrap with opts: the duration histogram keeps a series for
// each of the first opts.MaxAgentSeries agents whose calls it records,
// and records the calls of the others under agent="_other".
func WrapWith(l *si.Loop, tp trace.TracerProvider, mp metric.MeterProvider, opts Options) (*Loop, error) {
	w := &Loop{l: l}
	if tp != nil {
		w.tracer = tp.Tracer(ScopeName)
	}
	if mp != nil {
		h, err := mp.Meter(ScopeName).Float64Histogram("selfimprove.call.duration",
			metric.WithDescription("Duration of the calls the loop counted (every attempt and the waits between), by agent and outcome."), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(bounds()...))
		if err != nil {
			return nil, err
		}
		w.duration, w.series = h, newAgentSeries(opts.maxAgents())
	}
	return w, nil
}

func bounds() []float64 {
	var out []float64
	for _, b := range si.LatencyBuckets() {
		out = append(out, b.Seconds())
	}
	return out
}

// Execute runs fn through the Loop's ExecuteWithImprovement, in a span
// "selfimprove.call" under ctx's span, with the attributes
// selfimprove.agent, selfimprove.config.version, selfimprove.outcome
// (success, failure, ignored) and selfimprove.attempts; a failed call
// sets the span's status to Error with fn's error. fn's error and the
// Report are returned unchanged. The call's duration goes to the
// histogram when the loop counted the call: not when its caller
// cancelled it (ignored), nor when fn never ran (an open circuit, a
// spent Budget), nor when it ran untracked (an invalid agent ID, a
// closed Loop). A call whose fn panics (or calls runtime.Goexit) ends its
// span too, as a failure: status Error and an "exception" event, both
// with the panic's text scrubbed of secrets (see failure.Scrub); the
// panic then goes on to the caller.
func (w *Loop) Execute(ctx context.Context, agentID string, fn func(context.Context, si.Config) error) (si.Report, error) {
	var span trace.Span
	returned := false // ExecuteWithImprovement returned: fn did not unwind
	if w.tracer != nil {
		ctx, span = w.tracer.Start(ctx, "selfimprove.call", trace.WithSpanKind(trace.SpanKindInternal))
		defer func() {
			if returned {
				span.End()
				return
			}
			// fn panicked or ended its goroutine: recovered here, the
			// SDK's End sees no panic, so its exception event (the raw
			// panic text) gives way to a scrubbed one.
			pv := recover()
			endUnwound(span, agentID, pv)
			if pv != nil {
				panic(pv)
			}
		}()
	}
	rep, err := w.l.ExecuteWithImprovement(ctx, agentID, fn)
	returned = true
	out := "success"
	switch {
	case rep.Ignored:
		out = "ignored"
	case !rep.Success:
		out = "failure"
	}
	agent := strings.ToValidUTF8(agentID, "\uFFFD")
	if span != nil {
		span.SetAttributes(
			attribute.String("selfimprove.agent", agent),
			attribute.Int("selfimprove.config.version", rep.ConfigVersion),
			attribute.String("selfimprove.outcome", out),
			attribute.Int("selfimprove.attempts", rep.Attempts),
		)
		if rep.Improvement != nil || rep.Rollback != nil || rep.Confirmed != nil {
			span.SetAttributes(attribute.Bool("selfimprove.decision", true))
		}
		if err != nil && out == "failure" {
			span.SetStatus(codes.Error, failure.Scrub(err.Error()))
		}
	}
	if w.duration != nil && out != "ignored" && counted(&rep) {
		sets := w.series.of(agentID)
		opt := sets.success
		if out == "failure" {
			opt = sets.failure
		}
		w.duration.Record(ctx, rep.Duration.Seconds(), opt)
	}
	return rep, err
}

// endUnwound ends the span of a call whose fn did not return: it
// panicked with pv, or (pv nil) called runtime.Goexit. The loop counted
// the call as a failure of agentID.
func endUnwound(span trace.Span, agentID string, pv any) {
	msg := "fn called runtime.Goexit"
	typ := "runtime.Goexit"
	if pv != nil {
		msg, typ = failure.Scrub(fmt.Sprint("panic: ", pv)), fmt.Sprintf("%T", pv)
	}
	span.SetAttributes(
		attribute.String("selfimprove.agent", strings.ToValidUTF8(agentID, "\uFFFD")),
		attribute.String("selfimprove.outcome", "failure"),
	)
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", typ),
		attribute.String("exception.message", msg),
	))
	span.SetStatus(codes.Error, msg)
	span.End()
}

// counted reports whether the loop counted the call of rep among its
// agent's calls (selfimprove.calls, AgentView.Latency): fn ran (a call an
// open circuit or a spent Budget refused has no attempt) for an agent the
// loop tracks (a call with an invalid agent ID, or after Close, runs
// untracked).
func counted(rep *si.Report) bool {
	if rep.Attempts == 0 {
		return false
	}
	return rep.LoopErr == nil || !errors.Is(rep.LoopErr, si.ErrInvalidAgentID) && !errors.Is(rep.LoopErr, si.ErrClosed)
}

// sortedViews returns the views of l's agents in memory (Loop.Views), by
// ID. They are sorted through pointers: an AgentView is too large to move
// cheaply ten thousand times.
func sortedViews(l *si.Loop) []*si.AgentView {
	views := make([]si.AgentView, 0, l.Metrics().Agents+16)
	for v := range l.Views() {
		views = append(views, v)
	}
	all := make([]*si.AgentView, len(views))
	for i := range views {
		all[i] = &views[i]
	}
	slices.SortFunc(all, func(a, b *si.AgentView) int { return strings.Compare(a.AgentID, b.AgentID) })
	return all
}

// newQuality creates the quality and cost gauges on m.
func (in *instruments) newQuality(m metric.Meter) (err error) {
	in.scored, err = m.Int64ObservableGauge("selfimprove.quality.scored", metric.WithDescription("Calls scored under the config in force, by agent that has any."), metric.WithUnit("{call}"))
	if err != nil {
		return err
	}
	in.qualityMean, err = m.Float64ObservableGauge("selfimprove.quality.mean", metric.WithDescription("Mean score (0 to 1) of the calls scored under the config in force, by agent that has any."))
	if err != nil {
		return err
	}
	in.costPer, err = m.Float64ObservableGauge("selfimprove.cost.per_success", metric.WithDescription("Mean cost (AddCost's unit) per successful call under the config in force, by agent that has any."))
	if err != nil {
		return err
	}
	// The fleet's commit times: in seconds, as selfimprove.call.duration
	// (OpenTelemetry's conventions for durations); 0 without a fleet.
	in.commitTime, err = m.Float64ObservableCounter("selfimprove.fleet.commit.time", metric.WithDescription("Seconds the commits to the fleet took in all (divide by selfimprove.fleet.commits)."), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	in.commitMax, err = m.Float64ObservableGauge("selfimprove.fleet.commit.max", metric.WithDescription("Seconds the slowest commit to the fleet took."), metric.WithUnit("s"))
	return err
}

// observeQuality observes an agent's quality and cost, when it has any.
func (in *instruments) observeQuality(o metric.Observer, agent attribute.KeyValue, s si.Stats) {
	if s.Scored > 0 {
		o.ObserveInt64(in.scored, int64(s.Scored), metric.WithAttributes(agent))
		o.ObserveFloat64(in.qualityMean, s.Quality, metric.WithAttributes(agent))
	}
	if s.CostPerSuccess > 0 {
		o.ObserveFloat64(in.costPer, s.CostPerSuccess, metric.WithAttributes(agent))
	}
}
