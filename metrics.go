package selfimprove

// This file is the Loop's counters of its own machinery (Metrics).

import (
	"sync/atomic"
)

// Metrics counts what the loop's machinery did since New, including its
// failures, which are also logged.
type Metrics struct {
	Improvements, Confirmations, Rollbacks int64
	StrategyRuns, StrategyErrors           int64 // errors include panics and timeouts
	StrategyPanics, StrategyTimeouts       int64
	// StoreErrors counts the store's failed operations (its panics among
	// them, ErrStorePanic) and the calls that gave up waiting for it to
	// load their agent (ErrStoreSlow).
	StoreErrors                          int64
	Notified, NotifyErrors, NotifyPanics int64 // deliveries made (one per notifier that took an event); failed for good, panics included; the panics among them
	NotifyDropped                        int64
	RejectedTweaks                       int64 // tweaks the loop refused to apply
	Traces, TracesDropped                int64 // traces written; traces lost (also logged)
	Agents                               int64 // agents in memory now
	Loads, Evictions                     int64 // agents loaded from the store; idle agents evicted
	// FleetErrors counts the fleet's failed operations (WithFleet);
	// FleetConflicts, the decisions another replica took first.
	FleetErrors, FleetConflicts int64
	// FleetReplica is this Loop's name in the fleet ("" without one).
	// FleetDown is 1 while the fleet cannot be reached (the replica
	// backs off), else 0; FleetOutages counts the outages (see
	// EventFleetUnreachable).
	FleetReplica            string
	FleetDown, FleetOutages int64
	// FleetCommits counts the decisions committed to the fleet (won or
	// lost), FleetCommitNS the nanoseconds they took in all, and
	// FleetCommitMaxNS the slowest.
	FleetCommits, FleetCommitNS, FleetCommitMaxNS int64
	// FleetLeases counts the leases a strategy run took, FleetLeasesBusy
	// those another replica held, FleetLeaseErrors those that failed.
	FleetLeases, FleetLeasesBusy, FleetLeaseErrors int64
	// FleetLag is the most revisions one agent's copy was behind the
	// fleet's at the latest flush (a commit announced late or lost; 0 in
	// step); FleetBehind counts the times a flush found a copy behind.
	FleetLag, FleetBehind int64
	// FleetReplicas is how many replicas of the fleet are seen alive,
	// this one among them (see Loop.FleetReplicas; 0 without a fleet).
	FleetReplicas int64
}

type metrics struct {
	improvements, confirmations, rollbacks atomic.Int64
	strategyRuns, strategyErrors           atomic.Int64
	strategyPanics, strategyTimeouts       atomic.Int64
	storeErrors                            atomic.Int64
	notified, notifyErrors, notifyPanics   atomic.Int64
	notifyDropped, rejectedTweaks          atomic.Int64
	traces, tracesDropped                  atomic.Int64
	agents, loads, evictions               atomic.Int64
}
