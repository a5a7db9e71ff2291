package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// SimilarInput is the input of the tool similar_failures.
type SimilarInput struct {
	Text string `json:"text" jsonschema:"the failure to look up: an error message or a description of what went wrong; its first 4096 bytes count"`
	K    int    `json:"k,omitempty" jsonschema:"how many remembered failures to return, 1 to 100; default 5"`
}

// AgentInput is the input of the tools agent_status and recent_changes.
type AgentInput struct {
	Agent string `json:"agent" jsonschema:"the agent ID"`
}

// ProposalsInput is the input of the tool list_proposals.
type ProposalsInput struct {
	Status []string `json:"status,omitempty" jsonschema:"keep the proposals in these statuses (pending, approved, applied, confirmed, rolled_back, superseded, rejected); default all"`
	Agent  []string `json:"agent,omitempty" jsonschema:"keep the proposals of these agents; default all"`
}

// AgentStatus is the answer of agent_status.
type AgentStatus struct {
	admin.AgentSummary
	Config    selfimprove.Config     `json:"config"`
	Clusters  []selfimprove.Cluster  `json:"clusters"`
	Proposals []selfimprove.Proposal `json:"proposals"`
}

// RecentChanges is the answer of recent_changes.
type RecentChanges struct {
	Agent    string               `json:"agent"`
	Versions []admin.Version      `json:"versions"`
	Changes  []selfimprove.Change `json:"changes"`
}

// newMCPServer returns an MCP server whose tools answer from c.
func newMCPServer(c *client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "selfimprove", Version: version}, &mcp.ServerOptions{
		Instructions: "Tools of a selfimprove loop, which tracks AI agents' calls and tunes their configs. " +
			"Before acting on a failure, call similar_failures with its message: it returns the failures the loop " +
			"remembers that look like it, and the config changes that fixed them (state confirmed) or did not.",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "similar_failures",
		Description: "Remembered failure clusters similar to a text, most similar first, each with the config changes tried against it and how they fared."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in SimilarInput) (*mcp.CallToolResult, any, error) {
			if similarText(in.Text) == "" {
				return nil, nil, errors.New("text is required: the failure's message")
			}
			k := in.K
			if k == 0 {
				k = 5
			}
			if k < 1 || k > 100 {
				return nil, nil, fmt.Errorf("k must be in 1..100, not %d", k)
			}
			list, err := similar(ctx, c, in.Text, k)
			if err != nil {
				return nil, nil, err
			}
			return nil, list, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "agent_status",
		Description: "One agent: its config, health, stats over the window, threshold, circuit, the state of its latest change, its failure clusters and proposals."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in AgentInput) (*mcp.CallToolResult, any, error) {
			d, err := getAgent(ctx, c, in.Agent)
			if err != nil {
				return nil, nil, err
			}
			return nil, AgentStatus{AgentSummary: d.AgentSummary, Config: d.Config, Clusters: nonNil(d.Clusters), Proposals: nonNil(d.Proposals)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "recent_changes",
		Description: "An agent's config versions (who made each and why) and its recent changes, oldest first, with their verification: the stats before and after, and whether each was confirmed or rolled back."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in AgentInput) (*mcp.CallToolResult, any, error) {
			d, err := getAgent(ctx, c, in.Agent)
			if err != nil {
				return nil, nil, err
			}
			return nil, RecentChanges{Agent: d.ID, Versions: nonNil(d.Versions), Changes: nonNil(d.Changes)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "list_proposals",
		Description: "The proposals (config changes waiting for a person, and the decided ones), oldest first."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ProposalsInput) (*mcp.CallToolResult, any, error) {
			q := url.Values{"status": in.Status, "agent": in.Agent}
			var list admin.ProposalList
			if err := c.get(ctx, "/api/proposals", q, &list); err != nil {
				return nil, nil, err
			}
			list.Proposals = nonNil(list.Proposals)
			return nil, list, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "before_retrying",
		Description: "Before acting on a failure: what the loop remembers of failures like it, and the fixes that worked.",
		Arguments:   []*mcp.PromptArgument{{Name: "failure", Description: "the failure's message", Required: true}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			text := req.Params.Arguments["failure"]
			if similarText(text) == "" {
				return nil, errors.New("failure is required: the failure's message")
			}
			list, err := similar(ctx, c, text, 5)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(list)
			if err != nil {
				return nil, err
			}
			msg := "This call failed: " + text + "\n\nFailures the loop remembers that look like it, most similar first, " +
				"with the config changes tried against each (state \"confirmed\": it worked; \"rolled_back\": it made things worse):\n" +
				string(b) + "\n\nBefore retrying, prefer a fix that was confirmed, and avoid one that was rolled back."
			return &mcp.GetPromptResult{Description: "similar failures and their fixes",
				Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: msg}}}}, nil
		})
	return s
}

// runMCP serves the MCP server over stdin and stdout until the client
// disconnects or the command is interrupted. stdin goes through a
// frameFilter, which answers the lines that are no JSON-RPC message the
// SDK takes (which would end the session) with a JSON-RPC error.
func runMCP(ctx context.Context, e *env, _ []string) error {
	return withClient(e, false, func(c *client) error {
		s := newMCPServer(c, moduleVersion().Version)
		out := &lineWriter{w: e.stdout}
		pr, pw := io.Pipe()
		f := &frameFilter{out: out, stderr: e.stderr}
		go f.run(e.stdin, pw)
		err := s.Run(ctx, &mcp.IOTransport{Reader: pr, Writer: out})
		out.Close()
		pr.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
}
