package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// bin is the command, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "selfimprove-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(tmp, "selfimprove")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

const token = "s3cret-token-value"

var errBoom = errors.New("upstream 503: service unavailable")

// strategy tweaks "alpha" at once and files a proposal for the others.
func strategy(_ context.Context, a si.Analysis) (*si.Tweak, error) {
	c := a.Config
	c.Timeout += 2 * time.Second
	c.MaxAttempts = 2
	return &si.Tweak{Config: c, Reason: "raise the timeout", Review: a.AgentID != "alpha", Rule: "raise the quota", Confidence: 0.8}, nil
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openLoop opens a Loop on dir whose clock starts at start.
func openLoop(t *testing.T, dir string, start time.Time) (*si.Loop, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(start)
	l, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithNotifier(nil),
		si.WithStrategy(si.StrategyFunc(strategy)), si.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// writeState fills dir with a real Loop whose clock starts 30 minutes ago:
// "alpha" had a change applied, "beta" and "gamma" have pending proposals;
// then closes it. It returns the time on that clock at the end, where a
// live Loop opened after it starts its clock (started earlier, its clock
// would put the fixture's last calls in its future, and whether it counts
// them would depend on where the window's bucket boundaries fall).
func writeState(t *testing.T, dir string) time.Time {
	t.Helper()
	l, clk := openLoop(t, dir, time.Now().Add(-30*time.Minute))
	th := si.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute}
	for _, id := range []string{"alpha", "beta", "gamma"} {
		if err := l.SetThreshold(id, th); err != nil {
			t.Fatal(err)
		}
		for i := range 24 {
			l.ExecuteWithImprovement(context.Background(), id, func(ctx context.Context, _ si.Config) error {
				clk.Advance(20 * time.Millisecond)
				if id == "alpha" && i < 20 {
					si.AddCost(ctx, 0.002)
					return l.AddScore(ctx, 0.75)
				}
				if i >= 20 {
					return errBoom
				}
				return nil
			})
			clk.Advance(time.Second)
		}
	}
	if err := l.MarkCritical("alpha", true); err != nil {
		t.Fatal(err)
	}
	if len(l.Changes("alpha")) == 0 || len(l.Proposals(nil)) < 2 {
		t.Fatalf("fixture: alpha changes %d, proposals %d", len(l.Changes("alpha")), len(l.Proposals(nil)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return clk.Now()
}

// readOnly opens a read-only Loop on dir: the loop's own answers.
func readOnly(t *testing.T, dir string) *si.Loop {
	t.Helper()
	ro, err := si.OpenReadOnlyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := si.New(si.WithStore(ro), si.WithNotifier(nil), si.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

type result struct {
	stdout, stderr string
	code           int
}

// cli runs the command with args; env adds environment variables.
func cli(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+t.TempDir(), "SELFIMPROVE_TOKEN=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

// ok runs the command, wants exit code 0, and decodes stdout into v
// (when v is not nil).
func ok(t *testing.T, env []string, v any, args ...string) string {
	t.Helper()
	r := cli(t, env, args...)
	if r.code != 0 {
		t.Fatalf("%q: exit %d, stderr %q", args, r.code, r.stderr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("%q: %v in %s", args, err, r.stdout)
		}
	}
	return r.stdout
}

// fails runs the command and wants exit code code and a one-line error
// containing want.
func fails(t *testing.T, env []string, code int, want string, args ...string) {
	t.Helper()
	r := cli(t, env, args...)
	if r.code != code {
		t.Errorf("%q: exit %d, want %d (stderr %q)", args, r.code, code, r.stderr)
	}
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "selfimprove") || !strings.Contains(r.stderr, want) {
		t.Errorf("%q: stderr %q, want one line with %q", args, r.stderr, want)
	}
	if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, token) {
		t.Errorf("%q: stderr leaks: %q", args, r.stderr)
	}
}

func ids(agents []admin.AgentSummary) []string {
	var out []string
	for _, a := range agents {
		out = append(out, a.ID)
	}
	return out
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	end := writeState(t, dir)
	l := readOnly(t, dir)
	t.Run("reads, flags after", func(t *testing.T) { checkReads(t, []string{"--dir", dir}, nil, l) })
	t.Run("reads, flags before", func(t *testing.T) {
		var d admin.AgentDetail
		ok(t, nil, &d, "--dir", dir, "--json", "agent", "beta")
		if d.ID != "beta" || d.PendingProposals != 1 {
			t.Errorf("agent beta = %+v", d.AgentSummary)
		}
	})
	t.Run("export", func(t *testing.T) {
		out := ok(t, nil, nil, "export", "--dir", dir)
		var n int
		for line := range strings.Lines(out) {
			var m si.Memory
			if err := json.Unmarshal([]byte(line), &m); err != nil || m.Cluster == "" {
				t.Errorf("export line %q: %v", line, err)
			}
			n++
		}
		if want := len(l.Similar("upstream 503", 100)); n != want || n == 0 {
			t.Errorf("export: %d lines, want %d", n, want)
		}
	})
	t.Run("while a live Loop holds it", func(t *testing.T) {
		live, clk := openLoop(t, dir, end)
		defer live.Close()
		checkReads(t, []string{"--dir", dir}, nil, l)
		fails(t, nil, 1, "use --url", "approve", l.Proposals(nil)[0].ID, "--dir", dir)
		fails(t, nil, 1, "use --url", "rewind", "alpha", "1", "--reason", "r", "--dir", dir)

		// events -f reads the log as the live loop appends to it.
		follow := startFollow(t, "events", "-f", "--json", "--agent", "gamma", "--dir", dir, "--poll", "50ms")
		at := clk.Now()
		if err := live.MarkCritical("gamma", true); err != nil {
			t.Fatal(err)
		}
		follow.want(t, "gamma", si.EventCriticalSet, at)
	})
	t.Run("mutations", func(t *testing.T) {
		var beta string
		for _, p := range l.Proposals(nil) {
			if p.AgentID == "beta" {
				beta = p.ID
			}
		}
		var r admin.Result
		ok(t, nil, &r, "approve", beta, "--dir", dir, "--json")
		if r.Proposal == nil || r.Proposal.Status != si.ProposalApplied || r.Change == nil {
			t.Errorf("approve = %+v", r)
		}
		before := readOnly(t, dir).Config("alpha").Version
		out := ok(t, nil, nil, "--dir", dir, "rewind", "alpha", "1", "--reason", "v2 slows the checkout", "--author", "alice")
		if !strings.Contains(out, "Rewound alpha") {
			t.Errorf("rewind: %q", out)
		}
		after := readOnly(t, dir)
		if v := after.Config("alpha").Version; v != before+1 {
			t.Errorf("after rewind: v%d, want v%d", v, before+1)
		}
		chs := after.Changes("alpha")
		if last := chs[len(chs)-1]; !strings.Contains(last.Reason, "v2 slows the checkout (by alice)") {
			t.Errorf("rewind's change: %q", last.Reason)
		}
		var gamma string
		for _, p := range after.Proposals(nil) {
			if p.AgentID == "gamma" {
				gamma = p.ID
			}
		}
		ok(t, nil, &r, "reject", gamma, "--reason", "the quota is fine", "--dir", dir, "--json")
		if r.Proposal == nil || r.Proposal.Status != si.ProposalRejected || r.Proposal.Note != "the quota is fine" {
			t.Errorf("reject = %+v", r.Proposal)
		}
	})
}

func TestURL(t *testing.T) {
	dir := t.TempDir()
	live, clk := openLoop(t, dir, writeState(t, dir))
	defer live.Close()
	srv := httptest.NewServer(http.StripPrefix("/si", admin.Handler(live, admin.Options{Token: token, Logger: quiet()})))
	defer srv.Close()
	u := srv.URL + "/si"
	env := []string{"SELFIMPROVE_TOKEN=" + token}

	// The admin API serves the events this process recorded.
	for _, c := range []bool{false, true, false, true} {
		if err := live.MarkCritical("alpha", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := live.MarkCritical("gamma", true); err != nil {
		t.Fatal(err)
	}
	t.Run("reads", func(t *testing.T) { checkReads(t, []string{"--url", u}, env, live) })
	t.Run("token file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "token")
		os.WriteFile(f, []byte(token+"\n"), 0o600)
		ok(t, nil, nil, "agents", "--url", u, "--token-file", f)
		fails(t, nil, 1, "SELFIMPROVE_TOKEN", "agents", "--url", u)
		fails(t, []string{"SELFIMPROVE_TOKEN=wrong"}, 1, "token", "agents", "--url", u)
	})
	t.Run("events -f", func(t *testing.T) {
		follow := startFollow(t, "events", "-f", "--json", "--url", u, "--type", "critical_set")
		at := clk.Now()
		if err := live.MarkCritical("beta", true); err != nil {
			t.Fatal(err)
		}
		follow.want(t, "beta", si.EventCriticalSet, at)
	})
	t.Run("mutations", func(t *testing.T) {
		ps := live.Proposals(func(p si.Proposal) bool { return p.Status == si.ProposalPending })
		var r admin.Result
		ok(t, env, &r, "--url", u, "--json", "reject", ps[0].ID, "--reason", "no")
		if r.Proposal == nil || r.Proposal.Status != si.ProposalRejected {
			t.Errorf("reject = %+v", r)
		}
		ok(t, env, &r, "approve", ps[1].ID, "--url", u, "--json")
		if r.Proposal == nil || r.Proposal.Status != si.ProposalApplied {
			t.Errorf("approve = %+v", r)
		}
		v := live.Config("alpha").Version
		ok(t, env, &r, "--url", u, "rewind", "alpha", "1", "--reason", "R", "--json")
		if live.Config("alpha").Version != v+1 || r.Change == nil || r.Change.To.Version != v+1 {
			t.Errorf("rewind: loop v%d, answer %+v", live.Config("alpha").Version, r.Change)
		}
		fails(t, env, 1, "current", "rewind", "alpha", fmt.Sprint(v+1), "--reason", "R", "--url", u)
		fails(t, env, 2, "version", "rewind", "alpha", "99", "--reason", "R", "--url", u)
	})
	t.Run("bad input", func(t *testing.T) {
		fails(t, env, 3, "no agent", "agent", "nobody", "--url", u)
		fails(t, env, 3, "no agent", "rewind", "nobody", "1", "--reason", "R", "--url", u)
		fails(t, env, 3, "no proposal", "approve", "nope", "--url", u)
		fails(t, env, 3, "no proposal", "reject", "nope", "--reason", "R", "--url", u)
		fails(t, env, 2, "use --dir", "export", "--url", u)
		fails(t, env, 1, "reach the admin API", "agents", "--url", "http://127.0.0.1:1")
	})
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	missing := filepath.Join(dir, "missing")
	fails(t, nil, 3, "no agent", "agent", "nobody", "--dir", dir)
	fails(t, nil, 3, "no proposal", "approve", "nope", "--dir", dir)
	fails(t, nil, 3, "no proposal", "reject", "nope", "--reason", "R", "--dir", dir)
	fails(t, nil, 1, "does not exist", "status", "--dir", missing)
	fails(t, nil, 1, "does not exist", "approve", "x", "--dir", missing)
	fails(t, nil, 2, "unknown flag --bogus", "status", "--bogus")
	fails(t, nil, 2, "not a common flag", "--bogus", "status")
	fails(t, nil, 2, "unknown command", "frobnicate")
	fails(t, nil, 2, "expects NAME", "agent")
	fails(t, nil, 2, "expects AGENT VERSION", "rewind", "alpha")
	fails(t, nil, 2, "--reason is required", "reject", "x", "--dir", dir)
	fails(t, nil, 2, "not a version number", "rewind", "alpha", "x", "--reason", "R")
	fails(t, nil, 2, "--since", "events", "--since", "yesterday", "--dir", dir)
	fails(t, nil, 2, "needs a value", "similar", "x", "-k")
	fails(t, nil, 2, "exclude", "status", "--dir", dir, "--url", "http://127.0.0.1:1")
	fails(t, nil, 2, "no command", "--dir", dir)
	// The default directory is the library's.
	r := cli(t, nil, "status")
	if r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("status in an empty default directory: %+v", r)
	}
}

func TestHelp(t *testing.T) {
	out := ok(t, nil, nil, "-h")
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name) {
			t.Errorf("-h does not list %s", c.name)
		}
		h := ok(t, nil, nil, c.name, "-h")
		if !strings.Contains(h, "Usage: selfimprove "+c.name) || !strings.Contains(h, "Example:\n  selfimprove") || !strings.Contains(h, "Exit codes") {
			t.Errorf("%s -h:\n%s", c.name, h)
		}
	}
	var v VersionView
	ok(t, nil, &v, "version", "--json")
	if v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("version = %+v", v)
	}
}
