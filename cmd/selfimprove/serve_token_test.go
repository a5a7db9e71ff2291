package main

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestServeWithoutTokenSaysHowToSetOne starts `selfimprove serve --dir`
// without a token, as a newcomer does after the quick start, and tries a
// mutation (what the dashboard's Approve/Reject or `rewind --url` sends).
// The refusal says to start serve with SELFIMPROVE_TOKEN or --token-file,
// as serve's own first line does, and the CLI relays it without telling
// the client to check its token. Before, it said "set
// admin.Options.Token", a Go field the command's user cannot set.
func TestServeWithoutTokenSaysHowToSetOne(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	u, line := startServe(t, []string{"SELFIMPROVE_TOKEN="}, "--dir", dir) // the last value of a key is the one used
	resp, err := http.Post(u+"/api/agents/alpha/rewind", "application/json", strings.NewReader(`{"version":1,"reason":"try v1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("serve printed: %s", strings.TrimSpace(line))
	t.Logf("POST rewind: %d %s", resp.StatusCode, body)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	if strings.Contains(string(body), "admin.Options.Token") || !strings.Contains(string(body), "SELFIMPROVE_TOKEN") {
		t.Errorf("selfimprove serve refuses a mutation with %s; the remedy for serve is SELFIMPROVE_TOKEN or --token-file (as its own start line says), not admin.Options.Token", strings.TrimSpace(string(body)))
	}
	// The CLI relays the same text, and no advice of its own.
	out, _ := exec.Command(bin, "rewind", "alpha", "1", "--reason", "x", "--url", u).CombinedOutput()
	if s := string(out); !strings.Contains(s, "start selfimprove serve with SELFIMPROVE_TOKEN") || strings.Contains(s, "check the admin token") {
		t.Errorf("selfimprove rewind --url: %s", strings.TrimSpace(s))
	}
}
