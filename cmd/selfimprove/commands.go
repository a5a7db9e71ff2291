package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// StatusView is the JSON of selfimprove status: every agent, and the
// recent events.
type StatusView struct {
	Agents []admin.AgentSummary `json:"agents"`
	Events []admin.EventView    `json:"events"`
	// Unreadable lists, with --dir, the agents' state files that cannot
	// be read; absent when there are none.
	Unreadable []UnreadableFile `json:"unreadable,omitempty"`
}

// VersionView is the JSON of selfimprove version.
type VersionView struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}

func init() {
	commands = []*command{
		{name: "status", summary: "one screen: the agents, their health, and what changed recently",
			example: "selfimprove status --dir ./state", nargs: [2]int{0, 0},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.IntVar(&o.limit, "limit", 10, "recent events to show (1..1000)")
			}, run: runStatus},
		{name: "agents", summary: "list the agents",
			example: "selfimprove agents --unhealthy --url http://127.0.0.1:8080/selfimprove", nargs: [2]int{0, 0},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.BoolVar(&o.unhealthy, "unhealthy", false, "only the unhealthy agents")
				fs.StringVar(&o.prefix, "prefix", "", "only the agents whose ID starts with this")
			}, run: runAgents},
		{name: "agent", args: "NAME", summary: "one agent: config, threshold, stats, change history, failure clusters, proposals",
			example: "selfimprove agent support-bot --dir ./state", nargs: [2]int{1, 1}, run: runAgent},
		{name: "events", summary: "the recent events; -f follows new ones like tail -f",
			example: "selfimprove events -f --agent support-bot --type rolled_back --since 1h", nargs: [2]int{0, 0},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.BoolVar(&o.follow, "f", false, "follow: print new events as they are recorded, until interrupted")
				fs.Var(&o.agents, "agent", "only this agent's events (repeatable)")
				fs.Var(&o.types, "type", "only events of this type (repeatable)")
				fs.StringVar(&o.since, "since", "", "only events since this: a duration back from now (1h) or an RFC 3339 time")
				fs.IntVar(&o.limit, "limit", 100, "at most this many past events (1..1000)")
				fs.DurationVar(&o.pollInterval, "poll", 250*time.Millisecond, "with --dir and -f: how often to read the event log")
			}, run: runEvents},
		{name: "proposals", summary: "the proposals, oldest first",
			example: "selfimprove proposals --status pending", nargs: [2]int{0, 0},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.Var(&o.statuses, "status", "only proposals in this status (repeatable): pending, applied, rejected...")
				fs.Var(&o.agents, "agent", "only this agent's proposals (repeatable)")
			}, run: runProposals},
		{name: "approve", args: "ID", summary: "approve a pending proposal: its config is applied and verified",
			example: "selfimprove approve 019ca945-c170-7dad-8480-2aef2091eb8f --url http://127.0.0.1:8080/selfimprove",
			nargs:   [2]int{1, 1}, run: runApprove},
		{name: "reject", args: "ID", summary: "reject a proposal, with a reason",
			example: "selfimprove reject 019ca945-c170-7dad-8480-2aef2091eb8f --reason \"the quota is fine\"",
			nargs:   [2]int{1, 1},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.reason, "reason", "", "why (required)")
			}, run: runReject},
		{name: "rewind", args: "AGENT VERSION", summary: "install the config of an earlier version as the agent's next version",
			example: "selfimprove rewind support-bot 3 --reason \"v4 slows the checkout\" --url http://127.0.0.1:8080/selfimprove",
			nargs:   [2]int{2, 2},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.reason, "reason", "", "why (required)")
				fs.StringVar(&o.author, "author", "", "who, added to the reason")
				fs.BoolVar(&o.noVerify, "no-verify", false, "install it as an operator's config, without verification")
			}, run: runRewind},
		{name: "similar", args: "TEXT", summary: "remembered failures similar to TEXT, with the fixes that worked",
			example: "selfimprove similar \"upstream 503: service unavailable\" -k 3", nargs: [2]int{1, 1},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.IntVar(&o.k, "k", 5, "how many (1..100)")
			}, run: runSimilar},
		{name: "export", summary: "the failure memory as JSON lines, one cluster a line (--dir only)",
			example: "selfimprove export --dir ./state > memory.jsonl", nargs: [2]int{0, 0}, run: runExport},
		{name: "serve", summary: "serve the admin API and dashboard over a state directory",
			example: "selfimprove serve --dir ./state --addr 127.0.0.1:8080   # the token in $SELFIMPROVE_TOKEN", nargs: [2]int{0, 0},
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
				fs.BoolVar(&o.readOnly, "read-only", false, "serve without the directory's lock, beside a live Loop; mutations are refused")
				fs.BoolVar(&o.create, "create", false, "create the state directory when it does not exist (a sidecar for agents outside Go: docs/intake.md)")
				fs.Var(&o.allowHosts, "allow-host", "a host name (besides loopback) the Host header may carry; .example.com for its subdomains (repeatable)")
				fs.DurationVar(&o.idleTimeout, "idle-timeout", defaultLimits.idle, "close a keep-alive connection idle this long")
				fs.IntVar(&o.maxStreams, "max-streams", defaultLimits.maxStreams, "event streams served at once")
				serveTokenFlags(fs, o)
			}, run: runServe},
		{name: "mcp", summary: "a Model Context Protocol server over stdio: the loop's failure memory, agents and proposals for agents",
			example: "selfimprove mcp --dir ./state", nargs: [2]int{0, 0}, run: runMCP},
		{name: "version", summary: "print the version",
			example: "selfimprove version --json", nargs: [2]int{0, 0}, run: runVersion},
	}
}

// printJSON prints v, indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// allAgents reads every page of GET /api/agents.
func allAgents(ctx context.Context, c *client, q url.Values) ([]admin.AgentSummary, error) {
	l, err := agentList(ctx, c, q)
	return l.Agents, err
}

// agentList is every agent, page after page, with the time the first
// page was made (AgentList.Now).
func agentList(ctx context.Context, c *client, q url.Values) (admin.AgentList, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("limit", "1000")
	out := admin.AgentList{Agents: []admin.AgentSummary{}}
	for {
		var page admin.AgentList
		if err := c.get(ctx, "/api/agents", q, &page); err != nil {
			return admin.AgentList{}, err
		}
		if out.Now.IsZero() {
			out.Now = page.Now
		}
		out.Agents = append(out.Agents, page.Agents...)
		if page.Next == "" {
			return out, nil
		}
		q.Set("after", page.Next)
	}
}

func withClient(e *env, write bool, f func(c *client) error) error {
	c, err := e.connect(write)
	if err != nil {
		return err
	}
	err = f(c)
	if cerr := c.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close the state directory: %w", cerr)
	}
	return err
}

func runStatus(ctx context.Context, e *env, _ []string) error {
	if e.o.limit < 1 || e.o.limit > 1000 {
		return usageErr("--limit: %d is not in 1..1000", e.o.limit)
	}
	return withClient(e, false, func(c *client) error {
		c.reportUnreadable()
		agents, err := allAgents(ctx, c, nil)
		if err != nil {
			return err
		}
		bad, err := unreadableFiles(c)
		if err != nil {
			return err
		}
		evs, err := c.events(ctx, selfimprove.EventFilter{}, e.o.limit)
		if err != nil {
			return err
		}
		if e.o.json {
			return cmp.Or(printJSON(e.stdout, StatusView{Agents: agents, Events: nonNil(evs), Unreadable: bad}), unreadableErr(c, bad))
		}
		fmt.Fprintf(e.stdout, "%s\n\n", troubleLine(agents, len(bad)))
		if len(agents)+len(bad) > 0 {
			sortByTrouble(agents)
			agentTable(e.stdout, agents, bad)
			fmt.Fprintln(e.stdout)
		}
		if len(evs) == 0 {
			fmt.Fprintln(e.stdout, "No recent events.")
		} else {
			fmt.Fprintln(e.stdout, "Recent events:")
			if err := eventTable(e.stdout, evs); err != nil {
				return err
			}
		}
		return unreadableErr(c, bad)
	})
}

func eventTable(w io.Writer, evs []admin.EventView) error {
	tw := table(w)
	fmt.Fprintln(tw, "TIME\tTYPE\tAGENT\tMESSAGE")
	for _, ev := range evs {
		eventRow(tw, ev)
	}
	return tw.Flush()
}

func eventRow(w io.Writer, ev admin.EventView) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", ev.Time.UTC().Format(time.RFC3339), cell(string(ev.Type)), dash(cell(ev.AgentID)), cell(ev.Message))
}

// cell makes s fit a table cell and safe for a terminal: valid UTF-8; C0
// controls and DEL (tabs, newlines, escapes) become spaces; C1 controls
// (U+0080-U+009F) and the bidi controls, which a terminal would obey or
// which reorder the text around them, become visible escapes (\u202e).
func cell(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r >= 0x7f && r <= 0x9f || isBidi(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < ' ' || r == 0x7f:
			b.WriteByte(' ')
		case r >= 0x80 && r <= 0x9f || isBidi(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isBidi reports the bidi controls: the marks (U+061C, U+200E, U+200F)
// and the embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069).
func isBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pct(rate float64, calls int) string {
	if calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*rate)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func runAgents(ctx context.Context, e *env, _ []string) error {
	return withClient(e, false, func(c *client) error {
		c.reportUnreadable()
		q := url.Values{}
		if e.o.unhealthy {
			q.Set("unhealthy", "true")
		}
		if e.o.prefix != "" {
			q.Set("prefix", e.o.prefix)
		}
		list, err := agentList(ctx, c, q)
		if err != nil {
			return err
		}
		bad, err := unreadableFiles(c)
		if err != nil {
			return err
		}
		if e.o.json {
			return cmp.Or(printJSON(e.stdout, AgentsView{list, bad}), unreadableErr(c, bad))
		}
		if len(list.Agents)+len(bad) == 0 {
			fmt.Fprintln(e.stdout, "No agents.")
			return nil
		}
		return cmp.Or(agentTable(e.stdout, list.Agents, bad), unreadableErr(c, bad))
	})
}

// agentPath is the API path of agent id. The IDs "." and ".." are
// escaped whole (%2E): as path segments, HTTP path cleaning would take
// them for the directory itself or its parent.
func agentPath(id string) string {
	ref := admin.Ref(id)
	if id == "." || id == ".." {
		ref = strings.Repeat("%2E", len(id))
	}
	return "/api/agents/" + ref
}

func getAgent(ctx context.Context, c *client, id string) (admin.AgentDetail, error) {
	var d admin.AgentDetail
	if id == "" {
		return d, usageErr("the agent ID is empty")
	}
	err := c.get(ctx, agentPath(id), nil, &d)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == 404 {
		if err := unreadableAgent(c, id); err != nil {
			return d, err
		}
		return d, &notFoundError{fmt.Sprintf("no agent %q: see selfimprove agents", id)}
	}
	return d, err
}

func runAgent(ctx context.Context, e *env, args []string) error {
	return withClient(e, false, func(c *client) error {
		c.reportUnreadable()
		d, err := getAgent(ctx, c, args[0])
		if err != nil {
			return err
		}
		if e.o.json {
			return printJSON(e.stdout, d)
		}
		w := e.stdout
		tw := table(w)
		s := d.Stats
		fmt.Fprintf(tw, "Agent:\t%s\n", cell(d.ID))
		fmt.Fprintf(tw, "Config:\tv%d %s\n", d.Config.Version, configText(d.Config))
		fmt.Fprintf(tw, "State:\t%s; under v%d %s of %d calls; circuit %s\n", cell(stateText(&d.AgentSummary)), d.Current.Version,
			pct(d.Current.SuccessRate, d.Current.Calls), d.Current.Calls, cell(string(d.Circuit)))
		fmt.Fprintf(tw, "Health:\t%s over the window, recent calls weighted more\n", healthText(d.Health))
		fmt.Fprintf(tw, "Route:\t%s (primary %s)\n", routeText(&d.AgentSummary), dash(cell(d.Primary)))
		fmt.Fprintf(tw, "Next:\t%s\n", nextText(d.Next, d.NextAt))
		for _, r := range d.DeadRoutes {
			fmt.Fprintf(tw, "Dead route:\t%s until %s: %s\n", cell(r.Route), r.Until.Format("2006-01-02 15:04"), cell(r.Reason))
		}
		fmt.Fprintf(tw, "Stats:\t%d calls, %d failures, success %s, average latency %s (window %s)\n",
			s.Calls, s.Failures, pct(s.SuccessRate, s.Calls), s.AvgLatency.Round(time.Microsecond), s.Window)
		manual := ""
		if d.ManualThreshold {
			manual = ", set by an operator"
		}
		fmt.Fprintf(tw, "Threshold:\t%d failures in %s, then a cooldown of %s (profile %s%s)\n",
			d.Threshold.Failures, d.Threshold.Window, d.Threshold.Cooldown, cell(string(d.Profile)), manual)
		fmt.Fprintf(tw, "Critical:\t%v\n", d.Critical)
		tw.Flush()

		fmt.Fprintln(w, "\nVersions:")
		tw = table(w)
		fmt.Fprintln(tw, "VERSION\tMADE BY\tAT\tSTATE\tQUALITY\tCOST/SUCCESS\tREASON")
		for _, v := range d.Versions {
			mark, state, at := "", "-", "-"
			if v.Current {
				mark = " (current)"
			}
			if v.Change != nil {
				state = dash(cell(string(v.Change.State)))
			}
			if !v.At.IsZero() {
				at = v.At.UTC().Format(time.RFC3339)
			}
			quality, cost := qualityText(v.Quality)
			fmt.Fprintf(tw, "v%d%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Version, mark, cell(v.MadeBy), at, state, quality, cost, dash(cell(v.Reason)))
		}
		tw.Flush()
		routesTable(w, d.Routes)

		fmt.Fprintln(w, "\nFailure clusters:")
		if len(d.Clusters) == 0 {
			fmt.Fprintln(w, "  none in the window")
		} else {
			tw = table(w)
			fmt.Fprintln(tw, "CLUSTER\tCLASS\tCOUNT\tSIGNATURE")
			for _, cl := range d.Clusters {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", cell(cl.ID), cell(string(cl.Class)), cl.Count, cell(cl.Signature))
			}
			tw.Flush()
		}
		fmt.Fprintln(w, "\nProposals:")
		if len(d.Proposals) == 0 {
			fmt.Fprintln(w, "  none")
			return nil
		}
		return proposalTable(w, d.Proposals)
	})
}

func configText(c selfimprove.Config) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usageErr("--since: %q is negative", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageErr("--since: %q is neither a duration (1h30m) nor an RFC 3339 time", s)
	}
	return t, nil
}

func runEvents(ctx context.Context, e *env, _ []string) error {
	since, err := parseSince(e.o.since, time.Now())
	if err != nil {
		return err
	}
	if e.o.limit < 1 || e.o.limit > 1000 {
		return usageErr("--limit: %d is not in 1..1000", e.o.limit)
	}
	if e.o.pollInterval <= 0 {
		return usageErr("--poll must be positive")
	}
	f := selfimprove.EventFilter{AgentIDs: e.o.agents, Since: since}
	if f.Types, err = eventTypes(e.o.types); err != nil {
		return err
	}
	return withClient(e, false, func(c *client) error {
		if e.o.follow {
			return follow(ctx, c, f, e)
		}
		evs, err := c.events(ctx, f, e.o.limit)
		if err != nil {
			return err
		}
		if e.o.json {
			return printJSON(e.stdout, admin.EventList{Events: nonNil(evs)})
		}
		if len(evs) == 0 {
			fmt.Fprintln(e.stdout, "No events.")
			return nil
		}
		return eventTable(e.stdout, evs)
	})
}

func proposalTable(w io.Writer, ps []selfimprove.Proposal) error {
	tw := table(w)
	fmt.Fprintln(tw, "ID\tAGENT\tSTATUS\tCLASS\tCOUNT\tCONFIDENCE\tRATIONALE")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.2f\t%s\n", cell(p.ID), cell(p.AgentID), cell(string(p.Status)), cell(string(p.Class)), p.Count, p.Confidence, dash(cell(p.Rationale)))
	}
	return tw.Flush()
}

func runProposals(ctx context.Context, e *env, _ []string) error {
	return withClient(e, false, func(c *client) error {
		q := url.Values{}
		for _, s := range e.o.statuses {
			q.Add("status", s)
		}
		for _, a := range e.o.agents {
			q.Add("agent", a)
		}
		var list admin.ProposalList
		if err := c.get(ctx, "/api/proposals", q, &list); err != nil {
			return err
		}
		if e.o.json {
			list.Proposals = nonNil(list.Proposals)
			return printJSON(e.stdout, list)
		}
		if len(list.Proposals) == 0 {
			fmt.Fprintln(e.stdout, "No proposals.")
			return nil
		}
		return proposalTable(e.stdout, list.Proposals)
	})
}

func printResult(e *env, what string, r admin.Result) error {
	if e.o.json {
		return printJSON(e.stdout, r)
	}
	fmt.Fprintln(e.stdout, what)
	if r.Change != nil {
		fmt.Fprintf(e.stdout, "change %s: v%d -> v%d, %s\n", cell(r.Change.ID), r.Change.From.Version, r.Change.To.Version, dash(cell(string(r.Change.State))))
	}
	if r.Proposal != nil {
		fmt.Fprintf(e.stdout, "proposal %s: %s\n", cell(r.Proposal.ID), cell(string(r.Proposal.Status)))
	}
	if r.Agent != nil {
		fmt.Fprintf(e.stdout, "agent %s: config v%d, %d pending proposals\n", cell(r.Agent.ID), r.Agent.ConfigVersion, r.Agent.PendingProposals)
	}
	return nil
}

func proposalNotFound(err error, id string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == 404 {
		return &notFoundError{fmt.Sprintf("no proposal %q: see selfimprove proposals", id)}
	}
	return err
}

func runApprove(ctx context.Context, e *env, args []string) error {
	return withClient(e, true, func(c *client) error {
		var r admin.Result
		if err := c.post(ctx, "/api/proposals/"+url.PathEscape(args[0])+"/approve", admin.ApproveRequest{}, &r); err != nil {
			return proposalNotFound(err, args[0])
		}
		return printResult(e, "Approved.", r)
	})
}

func runReject(ctx context.Context, e *env, args []string) error {
	if e.o.reason == "" {
		return usageErr("--reason is required")
	}
	return withClient(e, true, func(c *client) error {
		var r admin.Result
		if err := c.post(ctx, "/api/proposals/"+url.PathEscape(args[0])+"/reject", admin.RejectRequest{Reason: e.o.reason}, &r); err != nil {
			return proposalNotFound(err, args[0])
		}
		return printResult(e, "Rejected.", r)
	})
}

func runRewind(ctx context.Context, e *env, args []string) error {
	v, err := strconv.Atoi(strings.TrimPrefix(args[1], "v"))
	if err != nil || v < 1 {
		return usageErr("VERSION: %q is not a version number (1, 2, ...)", args[1])
	}
	if e.o.reason == "" {
		return usageErr("--reason is required")
	}
	return withClient(e, true, func(c *client) error {
		if _, err := getAgent(ctx, c, args[0]); err != nil {
			return err
		}
		req := admin.RewindRequest{Version: v, Reason: e.o.reason, Author: e.o.author}
		if e.o.noVerify {
			no := false
			req.Verify = &no
		}
		var r admin.Result
		if err := c.post(ctx, agentPath(args[0])+"/rewind", req, &r); err != nil {
			return err
		}
		return printResult(e, fmt.Sprintf("Rewound %s to the config of v%d.", cell(args[0]), v), r)
	})
}

// moduleVersion is the version of the command's module, as built.
func moduleVersion() VersionView {
	v := VersionView{Version: "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Go = bi.GoVersion
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
	}
	return v
}

func runVersion(_ context.Context, e *env, _ []string) error {
	v := moduleVersion()
	if e.o.json {
		return printJSON(e.stdout, v)
	}
	fmt.Fprintf(e.stdout, "selfimprove %s (%s)\n", v.Version, v.Go)
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
