package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/self-improving-loop/selfimprove"
)

// Reading the state directory of a running Loop from another tool: the
// read-only store takes no lock and writes nothing.
func ExampleOpenReadOnlyStore() {
	dir, _ := os.MkdirTemp("", "selfimprove-example")
	defer os.RemoveAll(dir)

	live, err := selfimprove.New(selfimprove.WithDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer live.Close()
	live.ExecuteWithImprovement(context.Background(), "support-bot",
		func(context.Context, selfimprove.Config) error { return nil })
	live.MarkCritical("support-bot", true) // saves the agent now

	ro, err := selfimprove.OpenReadOnlyStore(dir)
	if err != nil {
		log.Fatal(err)
	}
	view, err := selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer view.Close()
	o, known := view.View("support-bot")
	fmt.Printf("known=%v critical=%v calls=%d\n", known, o.Critical, o.Stats.Calls)
	// Output:
	// known=true critical=true calls=1
}

func TestReadOnlyStore(t *testing.T) {
	dir := t.TempDir()
	// No periodic saves: the directory changes only when the test acts.
	live, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 12 {
		live.ExecuteWithImprovement(ctx, "a", func(context.Context, selfimprove.Config) error {
			if i%3 == 0 {
				return errors.New("upstream 503: service unavailable")
			}
			return nil
		})
	}
	live.ExecuteWithImprovement(ctx, "b/../c", func(context.Context, selfimprove.Config) error { return nil })
	if err := live.MarkCritical("a", true); err != nil {
		t.Fatal(err)
	}
	if err := live.MarkCritical("b/../c", true); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		t.Helper()
		before := snapshot(t, dir)
		ro, err := selfimprove.OpenReadOnlyStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		view, err := selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil))
		if err != nil {
			t.Fatal(err)
		}
		ids := slices.Sorted(view.Agents())
		if !slices.Equal(ids, []string{"a", "b/../c"}) {
			t.Errorf("Agents = %q", ids)
		}
		o, ok := view.View("a")
		if !ok || !o.Critical || o.Stats.Calls != 12 {
			t.Errorf("View(a) = %+v, %v", o, ok)
		}
		if _, ok := view.View("nobody"); ok {
			t.Error("View(nobody) known")
		}
		if d := cmp.Diff(live.History("a"), view.History("a")); d != "" {
			t.Errorf("History (-live +view):\n%s", d)
		}
		if err := view.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
		// A mutation fails, and Close reports the change it could not save.
		view, err = selfimprove.New(selfimprove.WithStore(ro), selfimprove.WithNotifier(nil),
			selfimprove.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := view.SetConfig("a", selfimprove.Config{}); !errors.Is(err, selfimprove.ErrReadOnly) {
			t.Errorf("SetConfig = %v, want ErrReadOnly", err)
		}
		if err := view.Close(); !errors.Is(err, selfimprove.ErrReadOnly) {
			t.Errorf("Close after a mutation = %v, want ErrReadOnly", err)
		}
		if d := cmp.Diff(before, snapshot(t, dir)); d != "" {
			t.Errorf("the directory changed (-before +after):\n%s", d)
		}
	}
	t.Run("while the live loop holds the directory", check)
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("after it closed", check)

	if _, err := selfimprove.OpenReadOnlyStore(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}

// TestReadOnlyStoreCorrupt: a corrupt file is reported, never set aside.
func TestReadOnlyStoreCorrupt(t *testing.T) {
	dir := t.TempDir()
	live, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := live.MarkCritical("a", true); err != nil {
		t.Fatal(err)
	}
	live.Close()
	ents, _ := os.ReadDir(filepath.Join(dir, "agents"))
	if len(ents) != 1 {
		t.Fatalf("agents/ has %d files", len(ents))
	}
	os.WriteFile(filepath.Join(dir, "agents", ents[0].Name()), []byte("{not json"), 0o600)
	before := snapshot(t, dir)
	ro, _ := selfimprove.OpenReadOnlyStore(dir)
	err = ro.LoadAgent("a", func([]byte) error { return errors.New("bad") })
	if !errors.Is(err, selfimprove.ErrCorruptState) {
		t.Errorf("LoadAgent = %v, want ErrCorruptState", err)
	}
	if d := cmp.Diff(before, snapshot(t, dir)); d != "" {
		t.Errorf("the directory changed (-before +after):\n%s", d)
	}
}

// snapshot maps each file under dir to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
