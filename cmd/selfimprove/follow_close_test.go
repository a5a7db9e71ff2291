package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFollowEndsWhenServeStops: events -f --url against selfimprove serve
// ends, with exit code 0, after "the loop closed", when serve is
// interrupted (docs/cli.md), with or without --read-only: serve closes its
// Loop while it shuts down, and the stream gets its event `closed`.
// Before, serve cut the stream first (Shutdown, then Close after 2 s) and
// closed the Loop only then: the follower saw the connection drop and
// reconnected every second, for ever.
func TestFollowEndsWhenServeStops(t *testing.T) {
	for _, mode := range [][]string{nil, {"--read-only"}} {
		t.Run(strings.Join(append([]string{"serve"}, mode...), " "), func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir)
			followServe(t, dir, mode)
		})
	}
}

// followServe runs serve on dir with the flags mode, follows its events,
// interrupts serve, and checks that the follower ends.
func followServe(t *testing.T, dir string, mode []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, append([]string{"serve", "--dir", dir, "--addr", "127.0.0.1:0"}, mode...)...)
	srv.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	serr, _ := srv.StderrPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	line, err := bufio.NewReader(serr).ReadString('\n')
	i := strings.Index(line, "http://")
	if err != nil || i < 0 {
		t.Fatalf("serve: %q %v", line, err)
	}
	u := strings.TrimSuffix(strings.Fields(line[i:])[0], "/")

	f := exec.CommandContext(ctx, bin, "events", "-f", "--url", u)
	f.Env = append(os.Environ(), "SELFIMPROVE_TOKEN="+token)
	ferr, _ := f.StderrPipe()
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	defer f.Process.Kill()
	sc := bufio.NewScanner(ferr)
	if !sc.Scan() || !strings.Contains(sc.Text(), "following") {
		t.Fatalf("events -f: %q", sc.Text())
	}
	srv.Process.Signal(os.Interrupt)
	if err := srv.Wait(); err != nil {
		t.Errorf("serve after an interrupt: %v", err)
	}
	// The follower's stderr ends when it exits; ctx bounds the wait.
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if len(seen) > 3 { // reconnecting, again and again
			break
		}
	}
	if len(seen) != 1 || !strings.Contains(seen[0], "the loop closed") {
		t.Fatalf("events -f after serve closed its loop: stderr %q, want only \"the loop closed\"", seen)
	}
	if err := f.Wait(); err != nil {
		t.Errorf("events -f after the loop closed: %v, want exit code 0", err)
	}
}
