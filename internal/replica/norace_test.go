//go:build !race

package replica

const raceOn = false
