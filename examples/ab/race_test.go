//go:build race

package main

// raceEnabled is true under the race detector, whose runs are several
// times slower: the long simulations run a small part of their trials.
const raceEnabled = true
