package selfimprove

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// agentIndex is the index of the agent IDs of an agents directory, kept
// by FileStore and ReadOnlyStore: each file's ID is read once, and the
// directory is read again only when it changed (its modification time,
// or a new file the store wrote), so that listing a page of agents does
// not parse every state file.
type agentIndex struct {
	mu     sync.Mutex
	byName map[string]string // file name -> agent ID
	sorted []string          // the IDs, in byte order
	stamp  time.Time         // the directory's modification time when read
	stale  bool              // the store wrote or removed a file since
}

// touch marks the index stale: the store changed the directory.
func (x *agentIndex) touch() {
	x.mu.Lock()
	x.stale = true
	x.mu.Unlock()
}

// ids returns the IDs of agents, in byte order (a slice the caller must
// not change), reading the directory again when it changed; a file whose
// ID the loop refuses goes to refused, once.
func (x *agentIndex) ids(fsys fsx.FS, agents string, refused func(name string, why error)) ([]string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	fi, err := fsys.Lstat(agents)
	if err != nil {
		return nil, fmt.Errorf("selfimprove: list agents: %w", err)
	}
	if x.byName != nil && !x.stale && fi.ModTime().Equal(x.stamp) {
		return x.sorted, nil
	}
	ents, err := fsys.ReadDir(agents)
	if err != nil {
		return nil, fmt.Errorf("selfimprove: list agents: %w", err)
	}
	old := x.byName
	x.byName = make(map[string]string, len(ents))
	for _, e := range ents {
		if id, ok := old[e.Name()]; ok && e.Type().IsRegular() {
			x.byName[e.Name()] = id // the name is the ID's: it holds the same one
		} else if id, ok := agentFileID(fsys, agents, e, refused); ok {
			x.byName[e.Name()] = id
		}
	}
	x.sorted = make([]string, 0, len(x.byName))
	for _, id := range x.byName {
		x.sorted = append(x.sorted, id)
	}
	slices.Sort(x.sorted)
	x.stamp, x.stale = fi.ModTime(), false
	return x.sorted, nil
}

// sortedLister is a store that lists its agents' IDs in byte order from an
// index: FileStore and ReadOnlyStore.
type sortedLister interface {
	sortedAgentIDs() ([]string, error)
}

// AgentsFrom returns at most n IDs of the agents the loop knows (those
// Agents yields), in byte order, from the first one at or after from
// (the page after an ID x starts from x+"\x00"). With a FileStore or a
// ReadOnlyStore it reads an index of the agents directory, not the state
// files, so that a page costs about the same over 50 agents or 10,000.
// After Close it returns only the agents in memory.
func (l *Loop) AgentsFrom(from string, n int) []string {
	if n <= 0 {
		return nil
	}
	// The n smallest of the agents in memory, from from on.
	var live []string
	l.agents.Range(func(k, _ any) bool {
		if id := k.(string); id >= from {
			if len(live) < n {
				live = append(live, id)
				if len(live) == n {
					slices.Sort(live)
				}
			} else if id < live[n-1] {
				i, _ := slices.BinarySearch(live, id)
				copy(live[i+1:], live[i:n-1])
				live[i] = id
			}
		}
		return true
	})
	if len(live) < n {
		slices.Sort(live)
	}
	stored := l.storedFrom(from, n)
	out := make([]string, 0, n)
	for len(out) < n && (len(live) > 0 || len(stored) > 0) {
		var id string
		switch {
		case len(stored) == 0 || len(live) > 0 && live[0] <= stored[0]:
			id, live = live[0], live[1:]
		default:
			id, stored = stored[0], stored[1:]
		}
		if len(out) == 0 || out[len(out)-1] != id {
			out = append(out, id)
		}
	}
	return out
}

// storedFrom returns at most n IDs of the store's agents, in byte order,
// from from on.
func (l *Loop) storedFrom(from string, n int) []string {
	if l.isClosed.Load() {
		return nil
	}
	var all []string
	var err error
	switch s := l.store.(type) {
	case sortedLister:
		all, err = s.sortedAgentIDs()
	case agentLister:
		err = s.ListAgents(func(id string) bool {
			if id >= from {
				all = append(all, id)
			}
			return true
		})
		slices.Sort(all)
	default:
		return nil
	}
	if err != nil {
		l.m.storeErrors.Add(1)
		l.log.Error("selfimprove: cannot list the agents in the store", "error", err)
	}
	i, _ := slices.BinarySearchFunc(all, from, strings.Compare)
	out := make([]string, 0, min(n, len(all)-i))
	for _, id := range all[i:] {
		if len(out) == n {
			break
		}
		if checkAgentID(id) == nil {
			out = append(out, id)
		}
	}
	return out
}
