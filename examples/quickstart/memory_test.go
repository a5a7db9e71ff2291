package main

import (
	"io"
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove"
)

// TestQuickStartMemoryCreditsTheTimeouts reads what the quick start left as
// `selfimprove similar timeout` does. Its strategy names no cluster; its
// backup-route fix was made for the timeouts that triggered the analysis,
// so the failure memory credits the confirmed fix to the timeout cluster
// (issue 43, item 3). Before, the fix was filed under the window's largest
// cluster, the rolled-back mirror's 503s, and `similar timeout` said
// nothing had worked for timeouts.
func TestQuickStartMemoryCreditsTheTimeouts(t *testing.T) {
	dir := t.TempDir()
	if err := run(io.Discard, dir); err != nil {
		t.Fatal(err)
	}
	l := readBack(t, dir)
	const timeouts = "31b623c915eec895" // "context deadline exceeded"
	var confirmed *selfimprove.Change
	for _, ch := range l.Changes("order-lookup") {
		if ch.State == selfimprove.ChangeConfirmed {
			confirmed = &ch
		}
	}
	if confirmed == nil || confirmed.Cluster != timeouts {
		t.Fatalf("confirmed change %+v; want one filed under the timeout cluster %s", confirmed, timeouts)
	}
	var got []string
	for _, m := range l.Similar("timeout", 5) {
		for _, f := range m.Fixes {
			got = append(got, m.Cluster+" "+string(f.State)+" "+f.To.Route)
		}
	}
	if want := timeouts + " confirmed backup"; !strings.Contains(strings.Join(got, "\n"), want) {
		t.Errorf("similar timeout: fixes %q; want %q", got, want)
	}
}
