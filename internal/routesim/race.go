//go:build race

package routesim

// raceOn: the race detector is on (see Run: the long scenarios run
// without it).
const raceOn = true
