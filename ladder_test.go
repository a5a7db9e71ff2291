package selfimprove_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/fakeclock"
)

// Issue 43, item 4: a reader of the state directory names the primary.
// The Loop that ran the agent had the ladder as an option; a Loop on a
// ReadOnlyStore, without it, reads it from the agent's state file.
// Before, the file held no ladder and the reader's Routes was empty
// (the page showed `probe route ""`).
func TestReaderNamesTheLadder(t *testing.T) {
	dir := t.TempDir()
	ladder := si.Routes{Primary: "gpt-4o", Fallbacks: []string{"claude-sonnet", "mistral"}, Models: map[string]string{"mistral": "mistral-large"}}
	clk := fakeclock.New(t0)
	l, err := si.New(si.WithDir(dir), si.WithClock(clk), si.WithNotifier(nil), si.WithLogger(quiet), si.WithRoutes(ladder))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetRoutes("tool", si.Routes{Off: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"chat", "tool"} {
		l.ExecuteWithImprovement(context.Background(), id, func(context.Context, si.Config) error { return nil })
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := readOnlyLoop(t, dir)
	if diff := cmp.Diff(ladder, r.Routes("chat")); diff != "" {
		t.Errorf("the reader's ladder of chat (-saved +read):\n%s", diff)
	}
	if got := r.Routes("tool"); !cmp.Equal(got, si.Routes{}) {
		t.Errorf("the reader's ladder of tool, kept off the ladder: %+v; want none", got)
	}
	if got := r.Routes("nobody"); !cmp.Equal(got, si.Routes{}) {
		t.Errorf("the ladder of an agent with no file: %+v", got)
	}
}

// A stored ladder outside the bounds of Routes is not given to readers;
// the rest of the file is read.
func TestReaderRefusesABadLadder(t *testing.T) {
	dir := t.TempDir()
	l, err := si.New(si.WithDir(dir), si.WithNotifier(nil), si.WithLogger(quiet),
		si.WithRoutes(si.Routes{Primary: "a", Fallbacks: []string{"b"}}))
	if err != nil {
		t.Fatal(err)
	}
	l.ExecuteWithImprovement(context.Background(), "x", func(context.Context, si.Config) error { return nil })
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "agents", "*.json"))
	if len(files) != 1 {
		t.Fatalf("agent files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	bad := strings.Replace(string(b), `"fallbacks":["b"]`, `"fallbacks":["b","b"]`, 1)
	if bad == string(b) {
		t.Fatalf("no ladder in %s", b)
	}
	if err := os.WriteFile(files[0], []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, _ := si.OpenReadOnlyStore(dir)
	r, err := si.New(si.WithStore(ro), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Routes("x"); !cmp.Equal(got, si.Routes{}) {
		t.Errorf("a duplicated fallback read back: %+v", got)
	}
	if got := r.Stats("x").Calls; got != 1 {
		t.Errorf("the rest of the file: %d calls, want 1", got)
	}
}

// Issue 43, item 7: an agent can be kept off the Loop's ladder. A tool
// agent whose primary is overloaded is retried on its own route and
// never told to move to a model's fallback; Routes says it is off.
func TestAgentKeptOffTheLadder(t *testing.T) {
	clk := fakeclock.New(t0)
	l := routeLoop(t, clk, si.WithDefaultConfig(si.Config{MaxAttempts: 2}))
	if err := l.SetRoutes("tool", si.Routes{Off: true}); err != nil {
		t.Fatal(err)
	}
	var routes []string
	for range 40 {
		l.ExecuteWithImprovement(context.Background(), "tool", func(_ context.Context, cfg si.Config) error {
			clk.Advance(100 * time.Millisecond)
			if cfg.Route != "" {
				routes = append(routes, cfg.Route)
				return nil
			}
			return errOverloaded
		})
		clk.Advance(10 * time.Second)
	}
	if len(routes) > 0 || l.Config("tool").Route != "" {
		t.Errorf("an agent off the ladder ran on %q, now on %q", routes, l.Config("tool").Route)
	}
	if got := l.Routes("tool"); !got.Off {
		t.Errorf("Routes(tool) = %+v; want Off", got)
	}
	if err := l.SetRoutes("tool", si.Routes{}); err != nil || l.Routes("tool").Primary != "primary" {
		t.Errorf("the zero Routes gives the agent back the Loop's ladder: %v, %+v", err, l.Routes("tool"))
	}
	for _, bad := range []si.Routes{{Off: true, Primary: "x"}, {Off: true, Fallbacks: []string{"y"}}} {
		if err := l.SetRoutes("tool", bad); !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "Off") {
			t.Errorf("SetRoutes(%+v): %v; want ErrInvalidOption naming Off", bad, err)
		}
	}
	if _, err := si.New(si.WithStore(si.NewRAMStore()), si.WithRoutes(si.Routes{Off: true})); !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "Off") {
		t.Errorf("WithRoutes(Routes{Off: true}): %v; want ErrInvalidOption naming Off", err)
	}
}
