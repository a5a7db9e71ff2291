package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/self-improving-loop/selfimprove/admin"
)

// troubleLine is the first line of status: "3 agents, 1 unhealthy, 1 to
// watch", unhealthy being the agents in trouble by the dashboard's rule
// (admin.AgentSummary.State; docs/dashboard.md), and the unreadable
// agents' state files, counted as agents and unhealthy: "3 agents, 2
// unhealthy (1 unreadable), 0 to watch".
func troubleLine(agents []admin.AgentSummary, unreadable int) string {
	bad, watch := 0, 0
	for _, a := range agents {
		switch {
		case !a.Healthy:
			bad++
		case a.State == admin.StateWatch:
			watch++
		}
	}
	more := ""
	if unreadable > 0 {
		more = fmt.Sprintf(" (%d unreadable)", unreadable)
	}
	return fmt.Sprintf("%s, %d unhealthy%s, %d to watch", plural(len(agents)+unreadable, "agent"), bad+unreadable, more, watch)
}

// stateRank orders the states: trouble first.
func stateRank(s string) int {
	switch s {
	case admin.StateTrouble:
		return 0
	case admin.StateWatch:
		return 1
	}
	return 2
}

// sortByTrouble sorts agents as the dashboard's overview does: in trouble
// first, then to watch; then by the success under the config in force,
// lowest first; then by ID.
func sortByTrouble(agents []admin.AgentSummary) {
	slices.SortStableFunc(agents, func(a, b admin.AgentSummary) int {
		return cmp.Or(cmp.Compare(stateRank(a.State), stateRank(b.State)),
			cmp.Compare(a.Current.SuccessRate, b.Current.SuccessRate), cmp.Compare(a.ID, b.ID))
	})
}

// stateText is an agent's state as the list shows it: "trouble: circuit
// open", "watch: verifying v3", "ok".
func stateText(a *admin.AgentSummary) string {
	if a.Why == "" {
		return dash(a.State)
	}
	return a.State + ": " + a.Why
}

// routeText is the route in force, "(fallback)" after a fallback; "-"
// when it has no name.
func routeText(a *admin.AgentSummary) string {
	r := dash(cell(a.Route))
	if a.Fallback {
		r += " (fallback)"
	}
	return r
}

// agentTable prints the agents, one a line: HEALTH is the success of the
// calls under the config in force (admin.AgentSummary.Current), SUCCESS
// that of the whole window. The unreadable state files come first.
func agentTable(w io.Writer, agents []admin.AgentSummary, bad []UnreadableFile) error {
	tw := table(w)
	fmt.Fprintln(tw, "AGENT\tSTATE\tVERSION\tROUTE\tCALLS\tSUCCESS\tHEALTH\tCHANGE\tPROPOSALS\tNEXT")
	unreadableRows(tw, bad)
	for i := range agents {
		a := &agents[i]
		fmt.Fprintf(tw, "%s\t%s\tv%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", cell(a.ID), cell(stateText(a)), a.ConfigVersion, routeText(a),
			a.Stats.Calls, pct(a.Stats.SuccessRate, a.Stats.Calls), pct(a.Current.SuccessRate, a.Current.Calls),
			dash(cell(string(a.ChangeState))), a.PendingProposals, nextText(a.Next, a.NextAt))
	}
	return tw.Flush()
}
