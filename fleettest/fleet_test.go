package fleettest_test

import (
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/fleettest"
)

func TestFleetSuite(t *testing.T) {
	fleettest.Run(t, func(*testing.T) (si.Fleet, si.Fleet) {
		m := fleettest.New(nil)
		return m, m
	})
}
