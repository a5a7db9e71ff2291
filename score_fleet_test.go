package selfimprove_test

import (
	"errors"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// TestFleetCallIDSecret: replicas that share WithCallIDSecret take each
// other's call IDs, and refuse one made up with the key a fleet shares
// without it (which anyone can compute: before, it was taken) or with
// another secret; a replica with another secret refuses theirs.
func TestFleetCallIDSecret(t *testing.T) {
	secret := []byte("the fleet's secret, 32 bytes....")
	e := newFleetEnv(t, 2, nil, si.WithCallIDSecret(secret))
	e.call(1, "a", nil) // replica 1 knows the agent
	rep := e.call(0, "a", nil)
	e.sync()
	if res, err := e.reps[1].ScoreCall("a", rep.ID, 0.7, 0); err != nil || res.Version != 1 {
		t.Fatalf("replica 0's call scored at replica 1: %+v, %v", res, err)
	}
	end := e.clk.Now()
	for _, forged := range []struct {
		name   string
		secret []byte
	}{{"the fleet's fixed key", nil}, {"another secret", []byte("another secret of at least 16 b.")}} {
		id := si.ForgeCallID(forged.secret, "a", end, 1)
		for r, l := range e.reps {
			if err := l.Score("a", id, 0.1); !errors.Is(err, si.ErrUnknownCall) {
				t.Errorf("an ID made with %s, at replica %d: %v, want ErrUnknownCall", forged.name, r, err)
			}
		}
	}
	if err := e.reps[0].Score("a", si.ForgeCallID(secret, "a", end, 1), 0.7); err != nil {
		t.Errorf("an ID made with the fleet's secret: %v", err)
	}
	e.opts = []si.Option{si.WithCallIDSecret([]byte("another secret of at least 16 b."))}
	other := e.add()
	e.call(2, "a", nil)
	if err := other.Score("a", rep.ID, 0.7); !errors.Is(err, si.ErrUnknownCall) {
		t.Errorf("a replica with another secret took the fleet's ID: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("short"), make([]byte, 65)} {
		if _, err := si.New(si.WithStore(si.NewRAMStore()), si.WithCallIDSecret(bad)); !errors.Is(err, si.ErrInvalidOption) {
			t.Errorf("a secret of %d bytes: %v, want ErrInvalidOption", len(bad), err)
		}
	}
	// Without the option, a fleet's check is public: an ID made with
	// the fixed key is taken (what the option is for).
	plain := newFleetEnv(t, 1, nil)
	plain.call(0, "a", nil)
	if err := plain.reps[0].Score("a", si.ForgeCallID(nil, "a", plain.clk.Now(), 1), 0.1); err != nil {
		t.Errorf("without WithCallIDSecret, an ID made with the fleet's fixed key: %v (the test's premise)", err)
	}
}

// TestFleetDuplicateScorePooledOnce: a retried score counts once in the
// fleet too: the replica that took it sends it to the pool once, and
// every replica books it once.
func TestFleetDuplicateScorePooledOnce(t *testing.T) {
	e := newFleetEnv(t, 2, nil)
	e.call(1, "a", nil)
	rep := e.call(0, "a", nil)
	e.sync()
	for range 3 {
		if _, err := e.reps[0].ScoreCall("a", rep.ID, 0.7, 42); err != nil {
			t.Fatal(err)
		}
	}
	e.sync()
	e.sync()
	for r, l := range e.reps {
		if v, _ := l.View("a"); v.Versions[1].Scored != 1 {
			t.Errorf("replica %d: %d scores of a call scored 3 times", r, v.Versions[1].Scored)
		}
	}
}
