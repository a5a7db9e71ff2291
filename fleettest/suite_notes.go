package fleettest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// notesT0 is the time the notes tests run at: the fleet takes the caller's
// now, not its own clock.
var notesT0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// notes returns g's notes of kind at now as name=until pairs.
func notes(t *testing.T, g si.Fleet, kind string, now time.Time) string {
	t.Helper()
	ns, err := g.Notes(context.Background(), kind, now)
	if err != nil {
		t.Fatalf("Notes(%q): %v", kind, err)
	}
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "%q=%s;", n.Route, n.Until.Sub(notesT0))
	}
	return b.String()
}

// testNotes checks that a note reaches the other handle, that only the
// first Note of a name in force reports none was, that a later until
// extends it and an earlier one does not shorten it, that an until not
// after now ends it, that notes end on their own, and that kinds and
// hostile names are kept apart.
func testNotes(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	now := notesT0
	note := func(h si.Fleet, kind, name string, until time.Duration, want bool) {
		t.Helper()
		was, err := h.Note(ctx, kind, name, "model_unavailable: the model `gpt-4o` does not exist", now.Add(until), now)
		if err != nil || was != want {
			t.Fatalf("Note(%q, %q, +%v) = %v, %v; want %v", kind, name, until, was, err, want)
		}
	}
	note(f, "route", "gpt-4o", time.Hour, false)
	note(g, "route", "gpt-4o", 2*time.Hour, true)
	note(g, "route", "gpt-4o", time.Minute, true)
	note(f, "route", "a\x00b", time.Hour, false)
	note(f, "route", "\xff\xfe", time.Hour, false)
	note(f, "route", "a", time.Hour, false)
	note(f, "cause", "gpt-4o", 3*time.Hour, false)
	if got, want := notes(t, g, "route", now), `"a"=1h0m0s;"a\x00b"=1h0m0s;"gpt-4o"=2h0m0s;"\xff\xfe"=1h0m0s;`; got != want {
		t.Fatalf("route notes: %s, want %s", got, want)
	}
	if got, want := notes(t, f, "cause", now), `"gpt-4o"=3h0m0s;`; got != want {
		t.Fatalf("cause notes: %s, want %s", got, want)
	}
	ns, _ := g.Notes(ctx, "route", now)
	if ns[2].Reason != "model_unavailable: the model `gpt-4o` does not exist" {
		t.Fatalf("reason %q", ns[2].Reason)
	}
	note(g, "cause", "gpt-4o", 0, true) // ended
	note(f, "cause", "gpt-4o", 0, false)
	if got := notes(t, f, "cause", now); got != "" {
		t.Fatalf("cause notes after the end: %s", got)
	}
	now = notesT0.Add(90 * time.Minute)
	if got, want := notes(t, g, "route", now), `"gpt-4o"=2h0m0s;`; got != want {
		t.Fatalf("route notes at +90m: %s, want %s", got, want)
	}
	note(g, "route", "a", time.Hour, false) // the old one ended on its own
	if _, err := f.Note(ctx, "route", strings.Repeat("x", si.MaxFleetNotes+1), "", now.Add(time.Hour), now); err == nil {
		t.Fatal("Note took a name longer than MaxFleetNotes bytes")
	}
}

// testNotesBounded checks that a fleet keeps at most MaxFleetNotes notes,
// those that end last, and cuts a long reason to 512 bytes.
func testNotesBounded(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	n := si.MaxFleetNotes + 44
	for i := range n {
		if _, err := f.Note(ctx, "route", fmt.Sprint("m", i), strings.Repeat("é", 400), notesT0.Add(time.Duration(i+1)*time.Minute), notesT0); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := g.Notes(ctx, "route", notesT0)
	if err != nil || len(ns) != si.MaxFleetNotes {
		t.Fatalf("%d notes (%v), want %d", len(ns), err, si.MaxFleetNotes)
	}
	for _, x := range ns {
		if x.Until.Before(notesT0.Add(45*time.Minute)) || len(x.Reason) > 512 || !strings.HasPrefix(x.Reason, "é") {
			t.Fatalf("kept %q until +%v, reason of %d bytes", x.Route, x.Until.Sub(notesT0), len(x.Reason))
		}
	}
}

// testNotesKindsApart checks that one kind's many notes do not push out
// another kind's few, even those that end first: a fleet of more
// replicas than MaxFleetNotes (kind "replica") keeps its dead routes.
func testNotesKindsApart(t *testing.T, f, g si.Fleet) {
	ctx := context.Background()
	for i := range 3 {
		if _, err := f.Note(ctx, "route", fmt.Sprint("r", i), "", notesT0.Add(time.Duration(i+1)*time.Second), notesT0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range si.MaxFleetNotes + 10 {
		if _, err := g.Note(ctx, "replica", fmt.Sprint("p", i), "", notesT0.Add(time.Minute+time.Duration(i)*time.Second), notesT0); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := notes(t, g, "route", notesT0), `"r0"=1s;"r1"=2s;"r2"=3s;`; got != want {
		t.Fatalf("routes %s, want %s", got, want)
	}
	ns, err := f.Notes(ctx, "replica", notesT0)
	if err != nil || len(ns) != si.MaxFleetNotes-3 {
		t.Fatalf("%d replica notes (%v), want %d", len(ns), err, si.MaxFleetNotes-3)
	}
	for _, x := range ns {
		if x.Until.Before(notesT0.Add(time.Minute + 13*time.Second)) {
			t.Fatalf("kept %q until +%v, not the replica notes that end last", x.Route, x.Until.Sub(notesT0))
		}
	}
}
