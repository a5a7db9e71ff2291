//go:build !race

package routesim

const raceOn = false
