package admin_test

import (
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestCostPerSuccessShown: the mean cost per successful call of the
// config in force is in /metrics and in the agent's API view (issue 30,
// item 2: AddCost's costs, which the integrations' token prices book).
func TestCostPerSuccessShown(t *testing.T) {
	f := newFixture(t, admin.Options{Token: token})
	costedCall(t, f.l, f.clk, "costly", 0.25, false, -1)
	costedCall(t, f.l, f.clk, "costly", 0.75, false, -1)
	costedCall(t, f.l, f.clk, "costly", 1, true, -1) // a failure's cost counts, per success
	m := httptestGet(admin.Handler(f.l, admin.Options{}), "/metrics")
	if !strings.Contains(m, `selfimprove_cost_per_success{agent="costly"} 1`) {
		t.Errorf("metrics lack the cost per success of 1:\n%s", m)
	}
	var d admin.AgentDetail
	f.get(t, "/api/agents/costly", &d)
	v := f.l.Config("costly").Version
	found := false
	for _, x := range d.Versions {
		if x.Version == v {
			found = x.Quality != nil && x.Quality.Costed == 3 && x.Quality.CostPerSuccess == 1
		}
	}
	if !found {
		t.Errorf("versions %+v", d.Versions)
	}
}
