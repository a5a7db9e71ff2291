package selfimprove

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
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
	// unlisted names the agent files passed over because they could not
	// be read or parsed, each logged once (at most maxUnlisted).
	unlisted map[string]bool
	// bad is why each agent file of the last reading of the directory
	// could not be read or parsed, by name.
	bad map[string]error
}

// maxUnlisted bounds agentIndex.unlisted: past it, such files go unlogged.
const maxUnlisted = 1024

// touch marks the index stale: the store changed the directory.
func (x *agentIndex) touch() {
	x.mu.Lock()
	x.stale = true
	x.mu.Unlock()
}

// ids returns the IDs of agents, in byte order (a slice the caller must
// not change), reading the directory again when it changed; a file whose
// ID the loop refuses goes to refused, once.
func (x *agentIndex) ids(fsys fsx.FS, agents string, refused func(name string, why error), log *slog.Logger) ([]string, error) {
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
	x.bad = nil
	for _, e := range ents {
		if id, ok := old[e.Name()]; ok && e.Type().IsRegular() {
			x.byName[e.Name()] = id // the name is the ID's: it holds the same one
			continue
		}
		id, why := agentFileID(fsys, agents, e, refused)
		switch {
		case why == nil:
			x.byName[e.Name()] = id
			continue
		case why == errNotAgentFile:
			continue
		}
		if x.bad == nil {
			x.bad = map[string]error{}
		}
		x.bad[e.Name()] = why
		if !x.unlisted[e.Name()] && len(x.unlisted) < maxUnlisted {
			if x.unlisted == nil {
				x.unlisted = map[string]bool{}
			}
			x.unlisted[e.Name()] = true
			log.Error("selfimprove: an agent's state file cannot be read: not listed (reading the agent by its ID reports it, and a Loop that owns the directory then sets it aside)",
				"file", filepath.Join(agents, e.Name()), "why", why)
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

// errNotAgentFile is agentFileID's answer for a file that is no agent's
// state file by its name or kind.
var errNotAgentFile = errors.New("not an agent's state file")

// agentFileID reads the agent ID of the state file e in agents. Files
// that are not agents' state files (errNotAgentFile), cannot be read or
// parsed, or are not named after the ID they hold are passed over, with
// why; a file whose ID the loop refuses goes to refused (why
// errNotAgentFile: reported there).
func agentFileID(fsys fsx.FS, agents string, e fs.DirEntry, refused func(name string, why error)) (string, error) {
	name := e.Name()
	if e.IsDir() || !isAgentFile(name) {
		return "", errNotAgentFile
	}
	data, err := fsx.ReadRegular(fsys, filepath.Join(agents, name), maxStateFile)
	if errors.Is(err, fsx.ErrNotRegular) || errors.Is(err, fsx.ErrTooLarge) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the file is named beside the error
		}
		return "", fmt.Errorf("%w: %w", ErrCorruptState, err)
	}
	if err != nil {
		return "", err // unreadable
	}
	var head struct {
		ID string `json:"agent_id_b64"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCorruptState, err)
	}
	id, err := base64.StdEncoding.DecodeString(head.ID)
	if err != nil || fileName(string(id)) != name {
		return "", fmt.Errorf("%w: its agent ID is not the one its name is made of", ErrCorruptState)
	}
	if err := checkAgentID(string(id)); err != nil {
		refused(name, err)
		return "", errNotAgentFile
	}
	return string(id), nil
}
