package fleettest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// noteKey names a note: its kind and name, kept apart whatever bytes they
// hold.
type noteKey struct{ kind, name string }

type memNote struct {
	until  time.Time
	reason string
}

// checkNote returns an error for a kind or name the fleet does not take.
func checkNote(kind, name string) error {
	if len(kind) == 0 || len(kind) > 16 || len(name) > si.MaxFleetNotes {
		return fmt.Errorf("fleettest: note %.16q %.32q: kind of 1 to 16 bytes and a name of at most %d bytes", kind, name, si.MaxFleetNotes)
	}
	return nil
}

// Note records a note for every Loop of the fleet (see
// selfimprove.Fleet).
func (m *Fleet) Note(ctx context.Context, kind, name, reason string, until, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	if err := checkNote(kind, name); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := noteKey{kind, name}
	old, was := m.notes[k]
	was = was && old.until.After(now)
	switch {
	case !until.After(now):
		delete(m.notes, k)
		return was, nil
	case was && !until.After(old.until):
		return was, nil
	}
	if m.notes == nil {
		m.notes = map[noteKey]memNote{}
	}
	m.notes[k] = memNote{until, failure.Bound(reason, 512)}
	for k, n := range m.notes {
		if !n.until.After(now) {
			delete(m.notes, k)
		}
	}
	for len(m.notes) > si.MaxFleetNotes {
		m.dropNote()
	}
	return was, nil
}

// dropNote drops the note that ends first of the kind with the most
// notes (of those kinds, the one whose note ends first), so that one
// kind's many notes never push out another's few. m.mu is held.
func (m *Fleet) dropNote() {
	count := map[string]int{}
	for k := range m.notes {
		count[k.kind]++
	}
	most := 0
	for _, c := range count {
		most = max(most, c)
	}
	var first noteKey
	var end time.Time
	for k, n := range m.notes {
		if count[k.kind] == most && (end.IsZero() || n.until.Before(end)) {
			first, end = k, n.until
		}
	}
	delete(m.notes, first)
}

// Notes returns the notes of kind in force at now, by name.
func (m *Fleet) Notes(ctx context.Context, kind string, now time.Time) ([]si.DeadRoute, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []si.DeadRoute
	for k, n := range m.notes {
		if k.kind == kind && n.until.After(now) {
			out = append(out, si.DeadRoute{Route: k.name, Until: n.until.UTC(), Reason: n.reason})
		}
	}
	slices.SortFunc(out, func(a, b si.DeadRoute) int { return strings.Compare(a.Route, b.Route) })
	return out, nil
}
