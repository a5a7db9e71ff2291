package selfimprove

// TestingEmit hands e to l's notifier queue, as a decision does; for the
// external tests of delivery.
func TestingEmit(l *Loop, e Event) { l.notify(&e) }

// TestingRace is set under the race detector, for the external tests
// that play fewer seeded runs there.
const TestingRace = raceEnabled

// TestingManualFlush has l's fleet flusher leave a kick to the next
// SyncFleet, so that a test's schedule says when every flush runs.
func TestingManualFlush(l *Loop) {
	if l.fleet != nil {
		l.fleet.Manual()
	}
}
