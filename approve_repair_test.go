package selfimprove_test

import (
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// Issue 41, item 1, under propose-only: a pricier model that repairs a
// fall of quality, filed for approval and approved, is judged against
// the fall's scores, as the same move made by the loop is, and so is not
// rolled back on cost while its gain may still be shown. The config's
// quality falls from 0.85 to 0.60 (σ 0.15) after 2,000 calls; its
// candidate costs 5 × and answers at 0.85; 10 % of the calls are scored,
// all costed. Before, the approval judged the repair as a change of no
// quality purpose: rolled back for its cost in 20 of 20 trials.
func TestApprovedRepairNotUndoneForItsCost(t *testing.T) {
	trials := int(seeds(20))
	kept, approved := 0, 0
	for seed := range uint64(trials) {
		w, primary := repairWorld(t, seed, si.WithRollbackPolicy(si.RollbackPolicy{ProposeOnly: true}))
		*primary = 0.60
		var verdict string
		for range 4000 {
			rep := w.call()
			if c := rep.Rollback; c != nil && c.To.Route == "big" {
				verdict = c.Verdict
			}
			for _, p := range w.e.l.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending && p.Config != nil }) {
				if p.Config.Route == "big" {
					if err := w.e.l.Approve(p.ID); err != nil {
						t.Fatalf("seed %d: approve: %v", seed, err)
					}
					approved++
				}
			}
		}
		if w.e.l.Config("bot").Route == "big" {
			kept++
		} else if seed < 3 {
			t.Logf("seed %d: on %q; the repair's rollback: %s", seed, w.e.l.Config("bot").Route, verdict)
		}
	}
	if approved == 0 {
		t.Fatal("no repair was filed for approval")
	}
	share := float64(kept) / float64(trials)
	if share < 0.95 {
		t.Errorf("the approved pricier repair kept in %d of %d trials, want at least 95 %%", kept, trials)
	}
	t.Logf("an approved pricier model (5 × the cost) repairing a fall 0.85 → 0.60, 10 %% scored: kept in %d of %d trials (%.0f %%), %d approvals", kept, trials, 100*share, approved)
}
