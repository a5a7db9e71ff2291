//go:build race

package selfimprove

// raceEnabled is set under the race detector, which makes the long
// simulations run a lighter form.
const raceEnabled = true
