package selfimprove

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
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
	// EventRejectedCleared: an operator cleared an agent's rejected tweaks.
	EventRejectedCleared EventType = "rejected_cleared"
	// EventProposalFiled: the strategy filed a proposal for review.
	EventProposalFiled EventType = "proposal_filed"
	// EventProposalApproved: an operator approved a proposal; one with a
	// config is followed by its EventImprovementApplied.
	EventProposalApproved EventType = "proposal_approved"
	// EventProposalRejected: an operator rejected a proposal.
	EventProposalRejected EventType = "proposal_rejected"
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
}

// Notifier receives the loop's events. The loop calls Notify from one
// background goroutine, one event at a time, with a context that carries
// the delivery deadline (WithNotifyTimeout). An error or panic is recovered,
// logged and counted in Metrics; it never reaches a wrapped call.
type Notifier interface {
	Notify(ctx context.Context, e Event) error
}

// NotifierFunc adapts a function to the Notifier interface.
type NotifierFunc func(ctx context.Context, e Event) error

// Notify calls f(ctx, e).
func (f NotifierFunc) Notify(ctx context.Context, e Event) error { return f(ctx, e) }

// LogNotifier logs each event through Logger (slog.Default() when nil):
// rollbacks and rollback failures at level Warn, everything else at Info.
// It is the loop's notifier unless WithNotifier is given.
type LogNotifier struct {
	Logger *slog.Logger
}

// Notify logs e.
func (n LogNotifier) Notify(ctx context.Context, e Event) error {
	l := n.Logger
	if l == nil {
		l = slog.Default()
	}
	level := slog.LevelInfo
	if e.Type == EventRolledBack || e.Type == EventRollbackFailed {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("event", string(e.Type)), slog.String("agent", e.AgentID), slog.String("id", e.ID)}
	if e.Change != nil {
		attrs = append(attrs, slog.Int("from_version", e.Change.From.Version), slog.Int("to_version", e.Change.To.Version))
	}
	if p := e.Proposal; p != nil {
		attrs = append(attrs, slog.String("proposal", p.ID), slog.String("class", string(p.Class)), slog.String("status", string(p.Status)))
	}
	if e.Err != "" {
		attrs = append(attrs, slog.String("error", e.Err))
	}
	l.LogAttrs(ctx, level, "selfimprove: "+e.Message, attrs...)
	return nil
}

// ErrNotifyQueueFull is logged (wrapped) when an event is dropped because
// the notifier queue is full; Metrics.NotifyDropped counts such drops.
var ErrNotifyQueueFull = errors.New("selfimprove: notifier queue full")

// dispatcher delivers events to a Notifier from one goroutine through a
// bounded queue. Sending never blocks: a full queue drops the event, counts
// it and logs it.
type dispatcher struct {
	n       Notifier
	log     *slog.Logger
	timeout time.Duration
	m       *metrics

	mu     sync.RWMutex // guards closed and sends on ch against close
	closed bool
	ch     chan Event
	done   chan struct{}
}

func newDispatcher(n Notifier, log *slog.Logger, timeout time.Duration, size int, m *metrics) *dispatcher {
	d := &dispatcher{n: n, log: log, timeout: timeout, m: m, ch: make(chan Event, size), done: make(chan struct{})}
	go d.run()
	return d
}

// send queues e without blocking.
func (d *dispatcher) send(e Event) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		d.drop(e, ErrClosed)
		return
	}
	select {
	case d.ch <- e:
	default:
		d.drop(e, ErrNotifyQueueFull)
	}
}

func (d *dispatcher) drop(e Event, why error) {
	d.m.notifyDropped.Add(1)
	d.log.Warn("selfimprove: event not delivered", "event", string(e.Type), "agent", e.AgentID, "id", e.ID, "error", why)
}

func (d *dispatcher) run() {
	defer close(d.done)
	for e := range d.ch {
		d.deliver(e)
	}
}

func (d *dispatcher) deliver(e Event) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				d.m.notifyPanics.Add(1)
				err = fmt.Errorf("selfimprove: notifier panicked: %v", r)
			}
		}()
		return d.n.Notify(ctx, e)
	}()
	if err != nil {
		d.m.notifyErrors.Add(1)
		d.log.Warn("selfimprove: notifier failed", "event", string(e.Type), "agent", e.AgentID, "id", e.ID, "error", err)
		return
	}
	d.m.notified.Add(1)
}

// close stops taking events and waits until the queued ones are delivered
// or ctx ends; events still queued then are counted as dropped.
func (d *dispatcher) close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.ch)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		n := len(d.ch)
		d.m.notifyDropped.Add(int64(n))
		return fmt.Errorf("selfimprove: notifier did not drain, %d events undelivered: %w", n, ctx.Err())
	}
}
