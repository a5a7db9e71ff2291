package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func TestServe(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--dir", dir, "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("serve: %q", line)
	}
	u := strings.TrimSuffix(strings.Fields(line[i:])[0], "/")
	env := []string{"SELFIMPROVE_TOKEN=" + token}

	// The directory is locked: mutations with --dir are refused.
	fails(t, nil, 1, "use --url", "approve", "x", "--dir", dir)
	var list admin.AgentList
	ok(t, env, &list, "agents", "--url", u, "--json")
	if len(list.Agents) != 3 {
		t.Errorf("agents over serve: %q", ids(list.Agents))
	}
	var ps admin.ProposalList
	ok(t, env, &ps, "proposals", "--url", u, "--json", "--status", "pending")
	var r admin.Result
	ok(t, env, &r, "reject", ps.Proposals[0].ID, "--reason", "R", "--url", u, "--json")
	if r.Proposal == nil || r.Proposal.Status != si.ProposalRejected {
		t.Errorf("reject over serve = %+v", r)
	}
	fails(t, nil, 1, "in use by a running Loop", "serve", "--dir", dir, "--addr", "127.0.0.1:0")

	t.Run("read-only beside it", func(t *testing.T) {
		ro := exec.CommandContext(ctx, bin, "serve", "--read-only", "--dir", dir, "--addr", "127.0.0.1:0")
		stderr, _ := ro.StderrPipe()
		if err := ro.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stderr).ReadString('\n')
		if err != nil || !strings.Contains(line, "read-only") {
			t.Fatalf("serve --read-only: %q %v", line, err)
		}
		ru := strings.TrimSuffix(strings.Fields(line[strings.Index(line, "http://"):])[0], "/")
		var ps admin.ProposalList
		ok(t, nil, &ps, "proposals", "--url", ru, "--json", "--status", "rejected")
		if len(ps.Proposals) != 1 {
			t.Errorf("rejected proposals over serve --read-only: %+v", ps.Proposals)
		}
		fails(t, env, 1, "mutations are disabled", "reject", ps.Proposals[0].ID, "--reason", "R", "--url", ru)
		ro.Process.Signal(os.Interrupt)
		if err := ro.Wait(); err != nil {
			t.Errorf("serve --read-only after an interrupt: %v", err)
		}
	})

	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(br)
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after an interrupt: %v %s", err, rest)
	}
	// Its work is on disk.
	if p := readOnly(t, dir).Proposals(func(p si.Proposal) bool { return p.ID == ps.Proposals[0].ID }); len(p) != 1 || p[0].Status != si.ProposalRejected {
		t.Errorf("after serve: %+v", p)
	}
}
