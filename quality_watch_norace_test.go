//go:build !race

package selfimprove_test

// raceOn is set under the race detector: the quality watch's figures
// (quality_watch_test.go) run a lighter form.
const raceOn = false
