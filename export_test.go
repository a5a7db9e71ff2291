package selfimprove

// TestingEmit hands e to l's notifier queue, as a decision does; for the
// external tests of delivery.
func TestingEmit(l *Loop, e Event) { l.notify(&e) }

// TestingCostSlotsOff turns off the score slots that an AddCost no loop
// could book turned on in every Loop (costSlots), for the tests that count
// the allocations of a call without one; it returns a func that puts the
// flag back.
func TestingCostSlotsOff() (restore func()) {
	slotLoops.Lock()
	was := costSlots.Swap(false)
	slotLoops.Unlock()
	return func() {
		slotLoops.Lock()
		costSlots.Store(was)
		slotLoops.Unlock()
	}
}
