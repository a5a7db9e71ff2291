// Package replica is the fleet's replication, beside the Loop's core and
// not through it: what one replica does to keep an agent's shared state
// in step with the fleet's, as a pure state machine (State), and the
// transport that carries its outputs: the Client (the fleet's operations
// with their answers as values, the outage and back-off, the flusher's
// goroutine, the outboxes of events and notes, the replicas seen), and
// its parts (Link, Chain, SaveLock, Queue, Deltas).
//
// It imports nothing of the root package: the root's Fleet interface,
// its agent state and its events stay there. The Client is generic in the
// root's types (a delta, a pool, an event, a note), so that the root's
// Fleet is the Client's Fleet as it is, and it reaches the Loop through
// a narrow seam, Hooks: the clock, the flush, the fleet back after an
// outage, an outage's event. The root's driver (the
// Loop) locks an agent, feeds the State one input (a decision to commit,
// the fleet's answer to a commit, a load, a notification), unlocks, and
// carries out what the input returned, in the order its doc gives; the
// outcome of that IO goes back in as the next input.
//
// The State's protocol is tested apart from the Loop by a deterministic
// simulator (sim_test.go) that drives two and three replicas through
// every interleaving of short scripts of decisions, commit outcomes,
// notifications, refreshes and take-backs, and checks the invariants of
// docs/fleet.md: a decision reported made is in force on every replica
// once they sync; one reported failed is in force on none (or, when its
// answer was lost and it landed after all, is recorded then); no update
// is lost.
package replica
