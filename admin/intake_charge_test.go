package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// countingStore is a RAMStore that counts the agent states read.
type countingStore struct {
	*si.RAMStore
	loads atomic.Int64
}

func (c *countingStore) LoadAgent(id string, decode func([]byte) error) error {
	c.loads.Add(1)
	return c.RAMStore.LoadAgent(id, decode)
}

// TestIntakeChargesFirst: a batch over the rate bound is refused before
// the intake reads any agent's state, and a batch refused on the state
// (a version the agent never had) is charged like one booked (issue 42,
// finding 7: a batch answered 429 read every agent first, and a refused
// batch was not charged).
func TestIntakeChargesFirst(t *testing.T) {
	st := &countingStore{RAMStore: si.NewRAMStore()}
	l, clk := newLoop(t, si.WithStore(st))
	h := admin.Handler(l, admin.Options{Token: token, OutcomeRate: 1, MaxOutcomes: 5, Now: clk.Now})
	f := &fixture{l: l, srv: httptest.NewServer(http.StripPrefix("/si", h))}
	t.Cleanup(f.srv.Close)
	if code, b, _ := f.postRes(t, token, batchOf("a", "b", "c", "d", "e")); code != 200 {
		t.Fatalf("the first batch: %d %s", code, b)
	}
	before := st.loads.Load()
	code, b, after := f.postRes(t, token, batchOf("f", "g", "h", "i", "j"))
	errorOf(t, "over the rate", code, b, 429, "outcomes")
	if n := st.loads.Load() - before; n != 0 || after != "1" {
		t.Errorf("a batch over the rate read %d agent states (Retry-After %q), want none", n, after)
	}
	clk.Advance(5 * time.Second) // the bucket is full again
	bad := strings.Replace(batchOf("a", "b", "c", "d", "e"), `"config_version": 1}]`, `"config_version": 9}]`, 1)
	code, b, _ = f.postRes(t, token, bad)
	errorOf(t, "a version the agent never had", code, b, 400, "outcomes[4].config_version")
	code, b, _ = f.postRes(t, token, batchOf("a"))
	errorOf(t, "after a batch refused on the state", code, b, 429, "outcomes")
	if s := l.Stats("a"); s.Calls != 1 {
		t.Errorf("a: %d calls, want the first batch's", s.Calls)
	}
}
