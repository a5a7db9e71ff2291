package selfimprove

// This file is the Loop's life: New, loading what the store kept, the
// background goroutines (the daily summary), and Close.

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"strconv"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// summaryLoop sends the daily summary until Close. It waits on a
// runtime timer; a Clock that lags it (WithCoarseClock, a simulated or a
// stepped-back clock) would read the time of day just sent as still to
// come: the next is always a day after the last sent.
func (l *Loop) summaryLoop(at time.Duration) {
	defer close(l.summaryDone)
	var sent time.Time // the time of day last sent for
	for {
		now := l.clock.Now()
		next := now.Add(nextDaily(now, at))
		if !sent.IsZero() && !next.After(sent) {
			next = sent.Add(nextDaily(sent, at))
		}
		t := time.NewTimer(next.Sub(now))
		select {
		case <-t.C:
			sent = next
			s := l.DailySummary()
			l.notify(&Event{ID: newID(s.Time), Time: s.Time, Type: EventDailySummary, Summary: &s,
				Message: "daily summary of " + strconv.Itoa(len(s.Agents)) + " agents"})
		case <-l.stopFlush:
			t.Stop()
			return
		}
	}
}

// nextDaily returns the wait from now until the next time of day at.
func nextDaily(now time.Time, at time.Duration) time.Duration {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	next := day.Add(at % (24 * time.Hour))
	if !next.After(now) {
		next = next.Add(24 * time.Hour)
	}
	return next.Sub(now)
}

// New opens (creating it if needed) the state directory and returns a
// Loop. Agents are loaded lazily, on their first call. It fails with an
// error wrapping ErrInvalidOption, naming the option, when an option is
// outside its documented range.
func New(opts ...Option) (*Loop, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.defaultConfig.Version = 1
	probes := o.probes.withDefaults()
	var coarse *coarseClock
	if o.coarse > 0 {
		coarse = newCoarseClock(o.coarse)
		o.clock = coarse
	}
	m := new(metrics)
	st, err := openStore(&o, m)
	if err != nil {
		return nil, err
	}
	l := &Loop{
		clock:           o.clock,
		realTime:        o.clock == Clock(realClock{}),
		noSlots:         o.noCallScores,
		mono:            newMonoClock(time.Now()),
		coarse:          coarse,
		strategy:        o.strategy,
		rules:           ruleBook{policy: o.policy.withDefaults(), probes: probes, breaker: o.breaker, newID: newID},
		mem:             newMemory(o.memory),
		breaker:         o.breaker,
		log:             o.logger,
		store:           st,
		defaultConfig:   o.defaultConfig,
		strategyTimeout: o.strategyTimeout,
		retryRules:      o.retry.rules(),
		jitterSeed:      o.retry.JitterSeed,
		seed:            maphash.MakeSeed(),
		memo:            failure.NewMemo(),
		m:               m,
		hub:             newHub(o.recentEvents),
		maxAgents:       o.maxAgents,
		stopFlush:       make(chan struct{}),
		flushDone:       make(chan struct{}),
	}
	if l.keys, err = loadCallKeys(st, o.fleet != nil, o.callSecret); err != nil {
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: call IDs are valid until the loop closes, not after a restart", "error", err)
	}
	l.rules.dead, l.rules.routes = &l.dead, &l.routes
	l.routes.def = o.routes
	l.limited.Store(o.routes != nil && len(o.routes.Limits) > 0)
	l.rules.cands, l.cands.def, l.rules.explore = &l.cands, o.candidates, o.exploration.withDefaults()
	if pol := l.rules.policy; pol.Method == MethodCanary {
		l.canaryCut = uint64(math.Ldexp(pol.CanaryFraction, 64))
	}
	l.restore(o.recentEvents)
	l.start(&o)
	return l, nil
}

// openStore returns the store of WithStore, or opens the FileStore of
// WithDir (DefaultDir without it), its errors counted in m.
func openStore(o *options, m *metrics) (Store, error) {
	if o.store != nil {
		return o.store, nil
	}
	if o.dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		o.dir = d
		o.logger.Info("selfimprove: keeping state in "+d+" (WithDir chooses where; WithStore(NewRAMStore()) keeps it in memory)", "dir", d)
	}
	o.fileOpts.Clock, o.fileOpts.Logger = o.clock, o.logger
	o.fileOpts.OnError = func(error) { m.storeErrors.Add(1) }
	o.fileOpts.MaxMemorySize = max(o.fileOpts.MaxMemorySize, int64(o.memory.MaxClusters)*memoryFileBytesPerCluster)
	fs, err := OpenFileStore(o.dir, o.fileOpts)
	if err != nil {
		return nil, err
	}
	return fs, nil
}

// restore reads back what the store kept of the loop: the failure memory
// and up to recent of the newest events. Neither failure is fatal.
func (l *Loop) restore(recent int) {
	if err := l.loadMemory(); err != nil {
		// Not fatal: the memory is not saved until it has been read, so
		// the saved one is never overwritten; flushes retry the read.
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot read the failure memory; will retry", "error", err)
	}
	if h, ok := l.store.(eventHistory); ok && recent > 0 {
		// Loop.Events and a resumed stream reach back past a restart.
		var evs []Event
		err := guard("RecentEvents", func() (err error) {
			evs, err = h.RecentEvents(recent)
			return err
		})
		if err != nil {
			l.m.storeErrors.Add(1)
			l.log.Error("selfimprove: cannot read the recent events", "error", err)
		}
		for i := range evs {
			l.hub.publish(&evs[i])
		}
	}
}

// start links the loop to its fleet, trace writer and notifier, and
// starts its background goroutines: the flusher, the fleet's, and the
// daily summary's.
func (l *Loop) start(o *options) {
	if o.fleet != nil {
		l.fleet = newFleetLink(l, o)
	}
	if o.traceMode != TracesOff {
		l.traces = newTraceWriter(l.store, o.logger, l.m, o.traceMode, o.traceQueue, o.traceWait)
	}
	ns := o.notifiers
	if !o.notifierSet {
		ns = []Notifier{logNotifier{o.logger}}
	}
	if len(ns) > 0 {
		l.disp = newDispatcher(ns, o.logger, o.notify, l.m)
	}
	go l.flushLoop(o.flushInterval)
	if l.fleet != nil {
		l.fleet.start()
	}
	if o.summaryOn && l.disp != nil {
		l.summaryDone = make(chan struct{})
		go l.summaryLoop(o.summaryAt)
	}
}

// Close stops the loop and is a barrier: after it returns, this Loop
// writes nothing to its store or directory, ever. It waits for strategies
// in flight (each bounded by the strategy timeout) and for the loads of
// agents under way (each bounded by the store; at most 32 read at once,
// and a load still queued behind them is dropped, unread), writes the
// pending traces, waits for the saves under way (each bounded by the
// store), saves every agent with unsaved changes, delivers the queued
// events (for at most the notify timeout) and closes the store, which
// releases the directory. It returns the errors it met.
//
// A call in flight when Close begins keeps its result; its bookkeeping is
// saved if it reaches the store before Close seals it, and is otherwise
// dropped, with ErrClosed in its Report.LoopErr. Calls made after Close
// still run fn, untracked, with Report.LoopErr ErrClosed; every other
// method that writes returns ErrClosed. Close is idempotent.
func (l *Loop) Close() error {
	l.closeOnce.Do(func() {
		l.bgMu.Lock()
		l.closed = true
		l.bgMu.Unlock()
		l.isClosed.Store(true)
		l.bg.Wait()
		var fleetErr error
		if l.fleet != nil {
			fleetErr = l.fleet.close()
		}
		close(l.stopFlush)
		<-l.flushDone
		if l.summaryDone != nil {
			<-l.summaryDone
		}
		if l.traces != nil {
			l.traces.close()
		}
		// Seal: wait for the writes admitted so far, admit no more.
		l.wmu.Lock()
		l.sealed = true
		errs := []error{fleetErr, l.flushAdmitted()}
		l.wmu.Unlock()
		if l.disp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.disp.timeout)
			errs = append(errs, l.disp.close(ctx))
			cancel()
		}
		errs = append(errs, guard("Close", l.store.Close))
		l.hub.close()
		if l.coarse != nil {
			l.coarse.close()
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}
