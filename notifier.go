package selfimprove

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// EventType names what happened.
type EventType string

// The event types.
const (
	// EventImprovementApplied: a tweak was installed and is being verified.
	EventImprovementApplied EventType = "improvement_applied"
	// EventChangeConfirmed: a change passed verification and is kept.
	EventChangeConfirmed EventType = "change_confirmed"
	// EventRolledBack: a change regressed and the previous config is back.
	EventRolledBack EventType = "rolled_back"
	// EventRollbackFailed: the loop rolled a change back in memory, so the
	// previous config is in force in this process, but could not record
	// the rollback in its store; after a restart the change would return.
	EventRollbackFailed EventType = "rollback_failed"
	// EventConfigSet: an operator set an agent's config with SetConfig.
	EventConfigSet EventType = "config_set"
	// EventThresholdSet: an operator set or removed a manual threshold.
	EventThresholdSet EventType = "threshold_set"
	// EventCriticalSet: an operator marked an agent critical, or not.
	EventCriticalSet EventType = "critical_set"
	// EventProposeOnlySet: an operator put an agent in propose-only
	// mode, or took it out (Loop.SetProposeOnly).
	EventProposeOnlySet EventType = "propose_only_set"
	// EventRejectedCleared: an operator cleared an agent's rejected tweaks.
	EventRejectedCleared EventType = "rejected_cleared"
	// EventProposalFiled: the strategy filed a proposal for review.
	EventProposalFiled EventType = "proposal_filed"
	// EventProposalApproved: an operator approved a proposal; one with a
	// config is followed by its EventImprovementApplied.
	EventProposalApproved EventType = "proposal_approved"
	// EventProposalRejected: an operator rejected a proposal.
	EventProposalRejected EventType = "proposal_rejected"
	// EventCircuitOpened: an agent's circuit opened (see CircuitBreaker).
	EventCircuitOpened EventType = "circuit_opened"
	// EventCircuitClosed: an agent's circuit closed after a good probe.
	EventCircuitClosed EventType = "circuit_closed"
	// EventRouteDead: a call found its route dead (no such model); no
	// change installs it until ProbePolicy.DeadFor has passed.
	EventRouteDead EventType = "route_dead"
	// EventAccountCause: agents are held for an account-wide cause
	// (quota, billing, auth; see ProbePolicy), raised once per cause;
	// EventAccountRecovered: the last agent held for it got through.
	EventAccountCause     EventType = "account_cause"
	EventAccountRecovered EventType = "account_recovered"
	// EventDigest: several events collapsed into one notification (see
	// NotifyOptions); they are in Event.Digest. Digests are not stored.
	EventDigest EventType = "digest"
	// EventDailySummary: the daily summary (see WithDailySummary), in
	// Event.Summary. Summaries are not stored.
	EventDailySummary EventType = "daily_summary"
	// EventFleetUnreachable and EventFleetRecovered: the fleet could not
	// be reached, and it can be again. They concern the Loop, not one
	// agent.
	EventFleetUnreachable EventType = "fleet_unreachable"
	EventFleetRecovered   EventType = "fleet_recovered"
)

// Event records one decision of the loop or one operator action. Events are
// written to the store before the call or method that caused them returns,
// and then handed to the Notifier asynchronously. An EventRollbackFailed
// is handed to the Notifier at once, and logged, after the rollback's own
// event, once the store works again.
type Event struct {
	// ID is unique across processes and sorts by time.
	ID string `json:"id"`
	// Time is when it happened, in UTC.
	Time    time.Time `json:"time"`
	Type    EventType `json:"type"`
	AgentID string    `json:"agent_id"`
	// Change is the change concerned, as it stands after the event.
	Change *Change `json:"change,omitempty"`
	// Proposal is the proposal concerned, as it stands after the event.
	Proposal *Proposal `json:"proposal,omitempty"`
	// Message is a one-line human-readable account.
	Message string `json:"message"`
	// Err is the text of the error behind an EventRollbackFailed.
	Err string `json:"error,omitempty"`
	// Digest holds the events an EventDigest collapses, oldest first.
	Digest []Event `json:"digest,omitempty"`
	// Summary is the summary of an EventDailySummary.
	Summary *Summary `json:"summary,omitempty"`
}

// LogValue returns e for a log line, as a group: event (the type),
// agent and id; from_version and to_version for a change; proposal,
// class and status for a proposal; and error when Err is set. The
// message is left out: it is the log line's message.
func (e Event) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("event", string(e.Type)), slog.String("agent", e.AgentID), slog.String("id", e.ID)}
	if e.Change != nil {
		attrs = append(attrs, slog.Int("from_version", e.Change.From.Version), slog.Int("to_version", e.Change.To.Version))
	}
	if p := e.Proposal; p != nil {
		attrs = append(attrs, slog.String("proposal", p.ID), slog.String("class", string(p.Class)), slog.String("status", string(p.Status)))
	}
	if e.Err != "" {
		attrs = append(attrs, slog.String("error", failure.Scrub(e.Err)))
	}
	return slog.GroupValue(attrs...)
}

// Notifier receives the loop's events. The loop calls Notify from one
// background goroutine, one event at a time, with a context that carries
// the attempt's deadline (NotifyOptions.Timeout). An error or panic is
// recovered, logged and counted in Metrics; it never reaches a wrapped
// call. Package notify has senders for Slack, Telegram, webhooks and
// slog.
//
// Redelivery: a failed delivery is tried again (NotifyOptions.Attempts,
// with backoff) when its error, or an error it wraps, has a method
// Redeliver() bool that returns true; the first such error in the chain
// decides, and an error without one is not redelivered. A method
// RetryAfter() time.Duration in the chain sets the wait before the next
// attempt, up to NotifyOptions.MaxBackoff. notify.DeliveryError has both:
// it asks for redelivery on 429, 5xx and transport errors.
//
// Validation: a Notifier may have a method Validate() error. New calls it
// and fails with an error wrapping ErrInvalidOption when it returns one,
// so that a bad address is reported at once rather than at the first
// delivery. Its error must not quote secrets (URLs, tokens).
type Notifier interface {
	Notify(ctx context.Context, e Event) error
}

// NotifierFunc adapts a function to the Notifier interface.
type NotifierFunc func(ctx context.Context, e Event) error

// Notify calls f(ctx, e).
func (f NotifierFunc) Notify(ctx context.Context, e Event) error { return f(ctx, e) }

// importance ranks event types for dropping when the queue is full: the
// least important pending event goes first.
func importance(t EventType) int {
	switch t {
	case EventRollbackFailed, EventRolledBack:
		return 4
	case EventAccountCause:
		return 4
	case EventImprovementApplied, EventProposalFiled, EventDigest, EventCircuitOpened, EventRouteDead:
		return 3
	case EventDailySummary:
		return 1
	case EventChangeConfirmed:
		return 0
	}
	return 2 // operator actions, proposal decisions
}

// NotifyOptions tunes how the loop delivers events to its Notifier. The
// zero value takes the defaults; see WithNotifyOptions.
type NotifyOptions struct {
	// Queue bounds the events waiting for delivery. Default 1,024; at
	// most 1,048,576.
	Queue int
	// Attempts is how many times one delivery (to each notifier) is tried
	// when it fails with an error that asks for redelivery (see
	// Notifier). Default 4; at most 100.
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each
	// attempt up to MaxBackoff. Defaults 1s and 30s; each at most 1h. A
	// Retry-After the receiver sent replaces the wait, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// BurstLimit events are delivered one by one within any BurstWindow;
	// the events that come beyond it are collapsed into one EventDigest,
	// delivered when the window ends. Defaults 5 and 1 minute; at most
	// 1,048,576 and 24 hours; a negative BurstLimit turns digests off.
	BurstLimit  int
	BurstWindow time.Duration
	// Timeout bounds each delivery attempt to a notifier, and how long
	// Close waits for the queue to drain. Default 5s; at most 1h.
	Timeout time.Duration
}

func (o NotifyOptions) withDefaults() NotifyOptions {
	if o.Queue <= 0 {
		o.Queue = 1024
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.BurstLimit == 0 {
		o.BurstLimit = 5
	}
	if o.BurstWindow <= 0 {
		o.BurstWindow = time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	return o
}

// redeliver is the dispatcher's rule for another attempt (see Notifier):
// the first error in err's chain with a method Redeliver() bool says yes.
// The chain is walked as Classify walks it, to a bounded depth and
// length, so that one whose Unwrap never ends (a cycle) is not walked
// forever, as errors.As would.
func redeliver(err error) bool {
	r, ok := findErr[interface{ Redeliver() bool }](err)
	return ok && r.Redeliver()
}

// retryAfter returns the wait err asks for, through a method
// RetryAfter() time.Duration, or 0.
func retryAfter(err error) time.Duration {
	if r, ok := findErr[interface{ RetryAfter() time.Duration }](err); ok {
		return r.RetryAfter()
	}
	return 0
}

// findErr returns the first error in err's chain (walked by walkErr) that
// is a T.
func findErr[T any](err error) (T, bool) {
	var (
		r  T
		ok bool
	)
	failure.Walk(err, func(e error) bool {
		r, ok = e.(T)
		return !ok
	})
	return r, ok
}

// dispatcher delivers events to its notifiers from one goroutine through a
// bounded queue, in the order they came. Sending never blocks: when the
// queue is full, the oldest of the least important pending events (or the
// new one, if less important than all) is dropped, counted and logged.
type dispatcher struct {
	ns      []Notifier // each gets every event, with its own retries
	log     *slog.Logger
	timeout time.Duration
	o       NotifyOptions
	m       *metrics

	mu      sync.Mutex
	levels  [levels]fifo // pending events by importance, each oldest first
	pending int          // events in levels
	seq     uint64       // arrival order across levels
	closed  bool
	closing chan struct{} // closed by close: stop waiting, drain
	wake    chan struct{} // capacity 1
	done    chan struct{}
	sent    []time.Time // times of the latest deliveries, for bursts

	dropsUnlogged atomic.Int64 // drops not yet logged
	lastDropLog   atomic.Int64 // Unix ns of the last drop logged
}

// levels is the number of importance levels (see importance).
const levels = 5

// fifo is a queue of events with their arrival numbers.
type fifo struct {
	evs  []Event
	seqs []uint64
	head int
}

func (f *fifo) len() int { return len(f.evs) - f.head }

func (f *fifo) push(e Event, seq uint64) {
	f.evs = append(f.evs, e)
	f.seqs = append(f.seqs, seq)
}

func (f *fifo) pop() Event {
	e := f.evs[f.head]
	f.evs[f.head] = Event{}
	f.head++
	if f.head == len(f.evs) {
		f.evs, f.seqs, f.head = f.evs[:0], f.seqs[:0], 0
	} else if f.head >= 64 && f.head*2 >= len(f.evs) {
		n := copy(f.evs, f.evs[f.head:])
		copy(f.seqs, f.seqs[f.head:])
		clear(f.evs[n:])
		f.evs, f.seqs, f.head = f.evs[:n], f.seqs[:n], 0
	}
	return e
}

func newDispatcher(ns []Notifier, log *slog.Logger, o NotifyOptions, m *metrics) *dispatcher {
	o = o.withDefaults()
	d := &dispatcher{ns: ns, log: log, timeout: o.Timeout, o: o, m: m,
		closing: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go d.run()
	return d
}

// send queues e without blocking.
func (d *dispatcher) send(e Event) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.drop(e, ErrClosed)
		return
	}
	var victim Event
	dropped := false
	rank := importance(e.Type)
	if d.pending >= d.o.Queue {
		// Drop the oldest of the least important pending events, the new
		// one's level included (the newer is kept), or else the new one.
		l := 0
		for l <= rank && d.levels[l].len() == 0 {
			l++
		}
		if l > rank {
			d.mu.Unlock()
			d.drop(e, ErrNotifyQueueFull)
			return
		}
		victim, dropped = d.levels[l].pop(), true
		d.pending--
	}
	d.seq++
	d.levels[rank].push(e, d.seq)
	d.pending++
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	if dropped {
		d.drop(victim, ErrNotifyQueueFull)
	}
}

// drop counts a lost event and logs it: at once, or, within a second of
// the last such line, in a later line with the count since (written by
// the next drop, the delivery goroutine, or Close).
func (d *dispatcher) drop(e Event, why error) {
	d.m.notifyDropped.Add(1)
	d.dropsUnlogged.Add(1)
	now := time.Now().UnixNano()
	last := d.lastDropLog.Load()
	if now-last < int64(time.Second) || !d.lastDropLog.CompareAndSwap(last, now) {
		return
	}
	d.log.Warn("selfimprove: events not delivered", "dropped", d.dropsUnlogged.Swap(0),
		"last_event", string(e.Type), "agent", e.AgentID, "id", e.ID, "error", why)
}

// logDrops logs the drops not logged yet, if the last line is a second old
// or force is set.
func (d *dispatcher) logDrops(force bool) {
	if d.dropsUnlogged.Load() == 0 {
		return
	}
	now := time.Now().UnixNano()
	last := d.lastDropLog.Load()
	if !force && now-last < int64(time.Second) || !d.lastDropLog.CompareAndSwap(last, now) {
		return
	}
	if n := d.dropsUnlogged.Swap(0); n > 0 {
		d.log.Warn("selfimprove: events not delivered", "dropped", n, "error", ErrNotifyQueueFull)
	}
}

// overBurst reports whether delivering the pending events one by one
// would go over BurstLimit within the window (at Close: a digest, if so).
func (d *dispatcher) overBurst() bool {
	n, since := 0, time.Now().Add(-d.o.BurstWindow)
	for _, t := range d.sent {
		if t.After(since) {
			n++
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.o.BurstLimit > 0 && n+d.pending > d.o.BurstLimit
}

// take removes and returns the pending events in arrival order: the
// oldest one, or all of them when all is set.
func (d *dispatcher) take(all bool) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Event
	for d.pending > 0 && (all || len(out) == 0) {
		best := -1
		for l := range d.levels {
			f := &d.levels[l]
			if f.len() > 0 && (best < 0 || f.seqs[f.head] < d.levels[best].seqs[d.levels[best].head]) {
				best = l
			}
		}
		out = append(out, d.levels[best].pop())
		d.pending--
	}
	return out
}

func (d *dispatcher) isClosing() bool {
	select {
	case <-d.closing:
		return true
	default:
		return false
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	defer d.logDrops(true)
	for {
		// In a burst (BurstLimit deliveries within the window), wait for
		// the window to end and send what came meanwhile as one digest.
		burst := false
		if lim := d.o.BurstLimit; lim > 0 && len(d.sent) >= lim {
			if end := d.sent[len(d.sent)-lim].Add(d.o.BurstWindow); time.Now().Before(end) {
				burst = true
				t := time.NewTimer(time.Until(end))
				select {
				case <-t.C:
				case <-d.closing:
					t.Stop()
				}
			}
		}
		evs := d.take(burst || d.isClosing() && d.overBurst())
		if len(evs) == 0 {
			if d.isClosing() {
				return
			}
			select {
			case <-d.wake:
			case <-d.closing:
			}
			continue
		}
		e := evs[0]
		if len(evs) > 1 {
			e = digest(evs)
		}
		d.deliver(e)
		d.logDrops(false)
		d.sent = append(d.sent, time.Now())
		if lim := max(d.o.BurstLimit, 1); len(d.sent) > lim {
			d.sent = append(d.sent[:0], d.sent[len(d.sent)-lim:]...)
		}
	}
}

// digest collapses events into one EventDigest.
func digest(evs []Event) Event {
	counts := map[EventType]int{}
	var order []EventType
	for _, e := range evs {
		if counts[e.Type] == 0 {
			order = append(order, e.Type)
		}
		counts[e.Type]++
	}
	parts := make([]string, 0, len(order))
	for _, t := range order {
		parts = append(parts, fmt.Sprintf("%d %s", counts[t], t))
	}
	last := evs[len(evs)-1]
	return Event{
		ID: newID(last.Time), Time: last.Time, Type: EventDigest,
		Message: fmt.Sprintf("%d events: %s", len(evs), strings.Join(parts, ", ")),
		Digest:  evs,
	}
}

// deliver hands e to each notifier in turn, each with its own retries, so
// that one that succeeded is not sent e again.
func (d *dispatcher) deliver(e Event) {
	for _, n := range d.ns {
		d.deliverTo(n, e)
	}
}

func (d *dispatcher) deliverTo(n Notifier, e Event) {
	wait := d.o.Backoff
	for attempt := 1; ; attempt++ {
		err := d.try(n, e)
		if err == nil {
			d.m.notified.Add(1)
			return
		}
		if attempt >= d.o.Attempts || !redeliver(err) || d.isClosing() {
			d.m.notifyErrors.Add(1)
			d.log.Warn("selfimprove: notifier failed", "event", string(e.Type), "agent", e.AgentID, "id", e.ID,
				"attempts", attempt, "error", failure.Scrub(err.Error()))
			return
		}
		w := min(wait, d.o.MaxBackoff)
		if ra := retryAfter(err); ra > 0 {
			w = min(ra, d.o.MaxBackoff)
		}
		wait = min(2*wait, d.o.MaxBackoff) // doubled without overflowing
		t := time.NewTimer(w)
		select {
		case <-t.C:
		case <-d.closing:
			t.Stop()
		}
	}
}

// try makes one delivery attempt under the per-attempt deadline.
func (d *dispatcher) try(n Notifier, e Event) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			d.m.notifyPanics.Add(1)
			err = fmt.Errorf("selfimprove: notifier panicked: %v", r)
		}
	}()
	return n.Notify(ctx, e)
}

// close stops taking events and waits until the queued ones are delivered
// (one by one, or one digest if that would go over BurstLimit; no waiting
// between retries) or ctx ends; events still queued then are dropped.
func (d *dispatcher) close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.closing)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		d.mu.Lock()
		n := d.pending
		d.levels, d.pending = [levels]fifo{}, 0
		d.mu.Unlock()
		d.m.notifyDropped.Add(int64(n))
		d.logDrops(true) // those the full queue dropped, not logged yet
		err := fmt.Errorf("selfimprove: notifier did not drain, %d events undelivered: %w", n, ctx.Err())
		if n > 0 { // left queued: logged with their own cause
			d.log.Warn("selfimprove: events not delivered", "dropped", n, "error", "left queued at Close: "+err.Error())
		}
		return err
	}
}

// newEvent makes an event, at now, about (a copy of) ch with a one-line
// message.
func newEvent(id string, now time.Time, t EventType, ch *Change) *Event {
	c := *ch
	agentID := ch.AgentID
	e := &Event{ID: id, Time: now.UTC(), Type: t, AgentID: agentID, Change: &c}
	switch t {
	case EventImprovementApplied:
		e.Message = fmt.Sprintf("agent %q: applied config v%d (was v%d): %s", agentID, ch.To.Version, ch.From.Version, ch.Reason)
	case EventChangeConfirmed:
		e.Message = fmt.Sprintf("agent %q: confirmed config v%d: %s", agentID, ch.To.Version, ch.Verdict)
	case EventRolledBack:
		e.Message = fmt.Sprintf("agent %q: rolled back config v%d to v%d: %s", agentID, ch.To.Version, ch.From.Version, ch.Verdict)
	case EventRollbackFailed:
		e.Message = fmt.Sprintf("agent %q: rolled back config v%d to v%d in memory, but could not record it", agentID, ch.To.Version, ch.From.Version)
	case EventConfigSet:
		e.Message = fmt.Sprintf("agent %q: config set to v%d by operator", agentID, ch.To.Version)
	}
	return e
}

// proposalEvent makes an event, at now, about (a copy of) p.
func proposalEvent(id string, now time.Time, t EventType, p *Proposal) *Event {
	c := p.clone()
	e := &Event{ID: id, Time: now.UTC(), Type: t, AgentID: p.AgentID, Proposal: &c}
	switch t {
	case EventProposalFiled:
		e.Message = fmt.Sprintf("agent %q: proposal %s for review (%s): %s", p.AgentID, p.ID, p.Class, p.Rationale)
	case EventProposalApproved:
		e.Message = fmt.Sprintf("agent %q: proposal %s approved", p.AgentID, p.ID)
	case EventProposalRejected:
		e.Message = fmt.Sprintf("agent %q: proposal %s rejected: %s", p.AgentID, p.ID, p.Note)
	}
	return e
}
