//go:build race

package replica

// raceOn: the race detector is on. The simulator runs on one goroutine,
// where it checks nothing and slows each run tenfold: the protocol's
// explorations run without it (.ci/run runs them so).
const raceOn = true
