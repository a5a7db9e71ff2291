package selfimprove

import "time"

// ForgeCallID is the ID of a call of agentID that ended at end under
// version, its check keyed by secret (nil: the fixed key a fleet shares
// without WithCallIDSecret): what a forger who knows the secret makes.
func ForgeCallID(secret []byte, agentID string, end time.Time, version int) uint64 {
	if secret == nil {
		secret = fleetCallKey
	}
	return callID(end.UnixNano(), version, callKeys{secret}.of(agentID))
}
