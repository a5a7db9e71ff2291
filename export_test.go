package selfimprove

// TestingEmit hands e to l's notifier queue, as a decision does; for the
// external tests of delivery.
func TestingEmit(l *Loop, e Event) { l.notify(&e) }

// TestingRace is set under the race detector, for the external tests
// that play fewer seeded runs there.
const TestingRace = raceEnabled
