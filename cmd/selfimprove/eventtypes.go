package main

import (
	"slices"
	"strings"

	"github.com/self-improving-loop/selfimprove"
)

// knownEventTypes are the event types of the library, as events --type
// takes them (TestKnownEventTypesAreTheLibrarys keeps them in step).
var knownEventTypes = []selfimprove.EventType{
	selfimprove.EventImprovementApplied, selfimprove.EventChangeConfirmed, selfimprove.EventRolledBack,
	selfimprove.EventRollbackFailed, selfimprove.EventConfigSet, selfimprove.EventThresholdSet,
	selfimprove.EventCriticalSet, selfimprove.EventProposeOnlySet, selfimprove.EventRejectedCleared,
	selfimprove.EventProposalFiled, selfimprove.EventProposalApproved, selfimprove.EventProposalRejected,
	selfimprove.EventCircuitOpened, selfimprove.EventCircuitClosed, selfimprove.EventRouteDead,
	selfimprove.EventAccountCause, selfimprove.EventAccountRecovered, selfimprove.EventDigest,
	selfimprove.EventDailySummary, selfimprove.EventFleetUnreachable, selfimprove.EventFleetRecovered,
}

// eventTypes checks the types of events --type: a type no event has (a
// typo, rollback for rolled_back) would match nothing, and -f would wait
// forever, so it is a usage error naming the valid types.
func eventTypes(types []string) ([]selfimprove.EventType, error) {
	var out []selfimprove.EventType
	for _, t := range types {
		if !slices.Contains(knownEventTypes, selfimprove.EventType(t)) {
			names := make([]string, len(knownEventTypes))
			for i, k := range knownEventTypes {
				names[i] = string(k)
			}
			return nil, usageErr("--type: %q is not an event type: one of %s", t, strings.Join(names, ", "))
		}
		out = append(out, selfimprove.EventType(t))
	}
	return out, nil
}
