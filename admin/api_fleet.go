// The fleet's endpoint of the admin API: GET /api/fleet.

package admin

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// FleetStatus is the answer of GET /api/fleet: this replica's view of the
// fleet it shares its agents with (selfimprove.WithFleet); Attached is
// false without one, and the rest zero. The counts are since the Loop
// started (see selfimprove.Metrics).
type FleetStatus struct {
	Attached bool   `json:"attached"`
	Replica  string `json:"replica,omitempty"`
	// Up is false while the replica cannot reach the fleet (it backs
	// off; calls keep their configs, changes are refused).
	Up          bool    `json:"up"`
	Outages     int64   `json:"outages"`
	Errors      int64   `json:"errors"`
	Conflicts   int64   `json:"conflicts"`
	Commits     int64   `json:"commits"`
	CommitAvgMS float64 `json:"commit_avg_ms"`
	CommitMaxMS float64 `json:"commit_max_ms"`
	LeasesTaken int64   `json:"leases_taken"`
	LeasesBusy  int64   `json:"leases_busy"`
	LeaseErrors int64   `json:"lease_errors"`
	RevisionLag int64   `json:"revision_lag"`
	Behind      int64   `json:"behind"`
	// Replicas are the replicas of the fleet seen alive, this one among
	// them, by name (see selfimprove.Loop.FleetReplicas: read every 5 s;
	// a replica drops out when closed, or 20 s after it was last seen).
	Replicas []FleetReplica `json:"replicas"`
	// Events are the latest outage events (fleet_unreachable,
	// fleet_recovered), at most 10, oldest first.
	Events []EventView `json:"events"`
}

// FleetReplica is one replica of the fleet seen alive (FleetStatus).
type FleetReplica struct {
	Name string `json:"name"`
	// LastSeen is when it last told the fleet it was alive.
	LastSeen time.Time `json:"last_seen"`
	// Self is true for the replica that answers.
	Self bool `json:"self,omitempty"`
}

// fleetStatus serves GET /api/fleet.
func (s *server) fleetStatus(w http.ResponseWriter, _ *http.Request) {
	m := s.l.Metrics()
	out := FleetStatus{Attached: m.FleetReplica != "", Replica: m.FleetReplica, Up: m.FleetReplica != "" && m.FleetDown == 0,
		Outages: m.FleetOutages, Errors: m.FleetErrors, Conflicts: m.FleetConflicts, Commits: m.FleetCommits,
		CommitMaxMS: float64(m.FleetCommitMaxNS) / 1e6, LeasesTaken: m.FleetLeases, LeasesBusy: m.FleetLeasesBusy,
		LeaseErrors: m.FleetLeaseErrors, RevisionLag: m.FleetLag, Behind: m.FleetBehind, Events: []EventView{},
		Replicas: []FleetReplica{}}
	for name, at := range s.l.FleetReplicas() {
		out.Replicas = append(out.Replicas, FleetReplica{Name: name, LastSeen: at.UTC(), Self: name == m.FleetReplica})
	}
	slices.SortFunc(out.Replicas, func(a, b FleetReplica) int { return strings.Compare(a.Name, b.Name) })
	if m.FleetCommits > 0 {
		out.CommitAvgMS = float64(m.FleetCommitNS) / float64(m.FleetCommits) / 1e6
	}
	evs := s.l.Events(selfimprove.EventFilter{Types: []selfimprove.EventType{selfimprove.EventFleetUnreachable, selfimprove.EventFleetRecovered}, Limit: 10})
	for _, e := range evs {
		out.Events = append(out.Events, EventView{Event: e})
	}
	writeJSON(w, http.StatusOK, out)
}
