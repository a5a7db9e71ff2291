package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// call calls a tool and decodes its structured answer into v; it returns
// the text of a tool error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, v any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		if len(res.Content) == 0 {
			t.Fatalf("%s: an error without content", name)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v in %s", name, err, b)
	}
	// The text content carries the same JSON, for clients that read only it.
	if len(res.Content) != 1 || !json.Valid([]byte(res.Content[0].(*mcp.TextContent).Text)) {
		t.Errorf("%s: content %+v", name, res.Content)
	}
	return ""
}

// checkTools lists and calls every tool, and checks the answers against
// l, the loop's own.
func checkTools(t *testing.T, cs *mcp.ClientSession, l *si.Loop) {
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"agent_status", "list_proposals", "recent_changes", "similar_failures"}; !slices.Equal(names, want) {
		t.Errorf("tools = %q, want %q", names, want)
	}

	var sim admin.SimilarList
	call(t, cs, "similar_failures", map[string]any{"text": "upstream 502: service unavailable", "k": 3}, &sim)
	want := l.Similar("upstream 502: service unavailable", 3)
	if len(sim.Memories) != len(want) || len(want) == 0 {
		t.Fatalf("similar_failures: %d memories, want %d", len(sim.Memories), len(want))
	}
	for i, m := range sim.Memories {
		if m.Cluster != want[i].Cluster || m.Count != want[i].Count || len(m.Fixes) != len(want[i].Fixes) {
			t.Errorf("similar_failures[%d] = %+v, want %+v", i, m, want[i])
		}
	}
	if len(sim.Memories[0].Fixes) == 0 {
		t.Error("similar_failures: no fixes")
	}

	var st AgentStatus
	call(t, cs, "agent_status", map[string]any{"agent": "alpha"}, &st)
	o, _ := l.View("alpha")
	if st.ID != "alpha" || st.Config.Version != o.Config.Version || st.Stats.Calls != o.Stats.Calls || st.Critical != o.Critical || len(st.Clusters) != len(l.Clusters("alpha")) {
		t.Errorf("agent_status = %+v, want %+v", st.AgentSummary, o)
	}
	if msg := call(t, cs, "agent_status", map[string]any{"agent": "nobody"}, &st); !strings.Contains(msg, "no agent") {
		t.Errorf("agent_status of an unknown agent: %q", msg)
	}

	var rc RecentChanges
	call(t, cs, "recent_changes", map[string]any{"agent": "alpha"}, &rc)
	chs := l.Changes("alpha")
	if len(rc.Changes) != len(chs) || len(chs) == 0 || rc.Changes[0].ID != chs[0].ID || len(rc.Versions) != len(l.History("alpha")) {
		t.Errorf("recent_changes = %+v, want %d changes", rc, len(chs))
	}

	var ps admin.ProposalList
	call(t, cs, "list_proposals", map[string]any{"status": []string{"pending"}}, &ps)
	wantPs := l.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
	if len(ps.Proposals) != len(wantPs) || len(wantPs) == 0 || ps.Proposals[0].ID != wantPs[0].ID {
		t.Errorf("list_proposals = %+v, want %d", ps.Proposals, len(wantPs))
	}

	if msg := call(t, cs, "similar_failures", map[string]any{"text": "x", "k": 1000}, &sim); !strings.Contains(msg, "k must be") {
		t.Errorf("similar_failures k=1000: %q", msg)
	}

	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "before_retrying", Arguments: map[string]string{"failure": "upstream 502: service unavailable"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Messages) != 1 || !strings.Contains(pr.Messages[0].Content.(*mcp.TextContent).Text, want[0].Cluster) {
		t.Errorf("before_retrying = %+v", pr.Messages)
	}
}

// TestMCP: the SDK's client over an in-memory transport.
func TestMCP(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	c, err := openDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := newMCPServer(c, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	checkTools(t, cs, readOnly(t, dir))
}

// TestMCPCommand: the SDK's client runs selfimprove mcp, beside a live
// Loop that holds the directory.
func TestMCPCommand(t *testing.T) {
	dir := t.TempDir()
	live, _ := openLoop(t, dir, writeState(t, dir))
	defer live.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp", "--dir", dir)
	cmd.Env = os.Environ()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTools(t, cs, live)

	// The answers follow the live loop's saves.
	pending := live.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
	if err := live.Reject(pending[0].ID, "no"); err != nil {
		t.Fatal(err)
	}
	var ps admin.ProposalList
	call(t, cs, "list_proposals", map[string]any{"status": []string{"rejected"}}, &ps)
	if len(ps.Proposals) != 1 || ps.Proposals[0].ID != pending[0].ID {
		t.Errorf("list_proposals after a rejection = %+v", ps.Proposals)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
