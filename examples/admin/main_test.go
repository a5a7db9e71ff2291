package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAdminExample: the URL the example prints serves what its doc
// comment says: $URL/api/agents is the agent list as JSON, with the
// example's two agents, and $URL/metrics the metrics. Before, it printed
// the URL with a trailing slash, so that $URL/api/agents asked for
// /selfimprove//api/agents and got a 307 redirect page; and it printed
// nothing for 20 s while its failing calls were retried with backoff.
func TestAdminExample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, w, "") }()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, r)
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "URL=")
	if !ok || strings.HasSuffix(url, "/") {
		t.Fatalf("printed %q, want URL=http://…/selfimprove", line)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(url + "/api/agents")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Agents []struct {
			ID string `json:"id"`
		} `json:"agents"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || len(list.Agents) != 2 {
		t.Errorf("GET $URL/api/agents: %d, %v, %+v; want the 2 agents as JSON", resp.StatusCode, err, list)
	}
	resp, err = noRedirect.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "selfimprove_") {
		t.Errorf("GET $URL/metrics: %d %.200s", resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.Close()
}
