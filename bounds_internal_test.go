package selfimprove

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWorstStateFits: an agent whose every stored config is at its
// bounds, in characters JSON escapes to six bytes, and whose every
// stored text is at its cap, saves in well under maxStateFile, and reads
// back: the bounds of Config keep any config the loop accepts readable.
func TestWorstStateFits(t *testing.T) {
	esc := func(n int) string { return strings.Repeat("\x01", n) } // "\u0001" in JSON
	params := map[string]string{}
	for i := range maxParamBytes / (maxParamName + 192) {
		params[esc(maxParamName-2)+strconv.Itoa(10+i)] = esc(192)
	}
	worst := func(v int) Config {
		return Config{Version: v, Timeout: maxTimeout, MaxAttempts: maxAttemptsLimit, Backoff: maxBackoff, Route: esc(maxRouteLen), Params: params}
	}
	if err := worst(1).validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	text := strings.Repeat("<", maxReason) // "\u003c" in JSON
	v := 0
	next := func() Config { v++; return worst(v) }
	st := newState("a", Config{})
	for range maxHistory {
		st.History = append(st.History, next())
	}
	for range maxChanges {
		st.Changes = append(st.Changes, Change{ID: "c", AgentID: "a", From: next(), To: next(), Reason: text, Verdict: text,
			AppliedAt: now, DecidedAt: now, State: ChangeRolledBack})
	}
	for range maxRejected {
		st.Rejected = append(st.Rejected, Tweak{Config: next(), Reason: text})
	}
	for range maxProposals {
		c := worst(0)
		st.Proposals = append(st.Proposals, Proposal{ID: "p", AgentID: "a", Config: &c, Rule: text, Rationale: text, Note: text,
			Signature: text, Examples: []string{text[:200], text[:200]}, Status: ProposalRejected, Created: now, Updated: now})
	}
	from, to := next(), next()
	st.Verifying = &Change{ID: "v", AgentID: "a", From: from, To: to, Reason: text, AppliedAt: now, State: ChangeVerifying}
	st.Config, st.MaxVersion = to, v
	enc := roundTrip(t, &st)
	t.Logf("%d configs: %d bytes (%.0f%% of the bound)", v+maxProposals, len(enc), 100*float64(len(enc))/maxStateFile)
	if len(enc) > maxStateFile/2 {
		t.Fatalf("the worst state is %d bytes, more than half of maxStateFile (%d)", len(enc), maxStateFile)
	}
}
