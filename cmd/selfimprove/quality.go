package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/self-improving-loop/selfimprove/admin"
)

// The quality and cost figures of the agent command (see docs/quality.md).

// healthText is an agent's health (0..1) as a percentage, as the
// dashboard shows it: 0.87 is "87.0%".
func healthText(h float64) string { return fmt.Sprintf("%.1f%%", 100*h) }

// qualityText is a version's or a route's mean score and cost per
// successful call, each with its count of calls ("-" when none).
func qualityText(q *admin.QualityView) (quality, cost string) {
	quality, cost = "-", "-"
	if q == nil {
		return
	}
	if q.Scored > 0 {
		quality = fmt.Sprintf("%.3f (%d scored)", q.Quality, q.Scored)
	}
	if q.Costed > 0 {
		cost = fmt.Sprintf("%.4g (%d costed)", q.CostPerSuccess, q.Costed)
	}
	return
}

// routesTable prints the quality and cost figures by route, when any.
func routesTable(w io.Writer, routes map[string]*admin.QualityView) {
	if len(routes) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRoutes:")
	tw := table(w)
	fmt.Fprintln(tw, "ROUTE\tQUALITY\tCOST/SUCCESS")
	for _, r := range slices.Sorted(maps.Keys(routes)) {
		quality, cost := qualityText(routes[r])
		name := r
		if name == "" {
			name = "(default)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(name), quality, cost)
	}
	tw.Flush()
}
