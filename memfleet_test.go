package selfimprove_test

import (
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fleettest"
)

func TestMemoryFleetSuite(t *testing.T) {
	fleettest.Run(t, func(*testing.T) (si.Fleet, si.Fleet) {
		m := si.NewMemoryFleet()
		return m, m
	})
}
