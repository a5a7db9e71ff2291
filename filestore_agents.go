package selfimprove

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// The agents directory of a FileStore and of the read-only store: the
// name of each agent's state file, the listing of the agents, and the
// bound on how many files it keeps (FileOptions.MaxAgentFiles).

// fileName maps an agent ID to a file name inside the agents directory:
// a readable prefix of at most 40 bytes from [a-z0-9_-], then "_" and 32 hex
// digits of the ID's SHA-256, then ".json". Every ID, whatever its bytes,
// gets a name with no separator and no dots but the extension's, so it
// never leaves the directory; distinct IDs get distinct names.
func fileName(id string) string {
	sum := sha256.Sum256([]byte(id))
	b := make([]byte, 0, 40+1+32+5)
	for i := 0; i < len(id) && len(b) < 40; i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	b = append(b, '_')
	b = hex.AppendEncode(b, sum[:16])
	return string(append(b, ".json"...))
}

// ListAgents implements agentLister: it reads the agent ID of each state
// file in the agents directory (files set aside as corrupt and temporary
// files are passed over, and so are files that cannot be read or parsed,
// each logged as an error once). A file
// whose agent ID the loop refuses (the empty ID an older version could
// write, see ErrInvalidAgentID) is set aside like a corrupt one and
// logged as an error.
func (s *FileStore) ListAgents(yield func(agentID string) bool) error {
	ids, err := s.sortedAgentIDs()
	for _, id := range ids {
		if !yield(id) {
			break
		}
	}
	return err
}

// sortedAgentIDs implements sortedLister, from the store's index.
func (s *FileStore) sortedAgentIDs() ([]string, error) {
	return s.idx.ids(s.fs, s.agents, s.refuseFile, s.log)
}

// emptyIDFile is the name of the empty agent ID's state file.
var emptyIDFile = fileName("")

// refuseFile sets aside agents/name, whose agent ID the loop refuses
// (why), and logs it as an error.
func (s *FileStore) refuseFile(name string, why error) {
	s.idx.stale = true // s.idx.mu is held, or the store is opening
	aside, err := s.setAside(s.agents, name)
	if err != nil {
		s.log.Error("selfimprove: a state file holds an agent ID the loop refuses; setting it aside failed",
			"file", filepath.Join("agents", name), "why", why, "error", err)
		return
	}
	s.log.Error("selfimprove: a state file holds an agent ID the loop refuses: set aside, not listed",
		"file", filepath.Join("agents", name), "why", why, "moved_to", filepath.Join("agents", aside))
}

// defaultMaxAgentFiles is FileOptions.MaxAgentFiles's default.
const defaultMaxAgentFiles = 100_000

// isAgentFile reports whether name, in agents/, is an agent's state file
// (not a temporary file, nor one set aside).
func isAgentFile(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
}

func countAgentFiles(fs fsx.FS, dir string) (int, error) {
	ents, err := fs.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if isAgentFile(e.Name()) {
			n++
		}
	}
	return n, err
}

// noteNewFile counts a new agent file, and prunes the files saved longest
// ago when the count passes MaxAgentFiles (or, after a prune that could
// not get under it, a sixteenth of it more).
func (s *FileStore) noteNewFile() {
	s.idx.touch()
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	s.files++
	max := s.opts.MaxAgentFiles
	if max < 0 || s.files <= max || s.files <= s.pruneAt {
		return
	}
	err := s.prune(max - max/16)
	if err == nil && s.files > max {
		err = fmt.Errorf("selfimprove: %d agent files, over FileOptions.MaxAgentFiles (%d): the others hold agents with history (a config change, an operator setting or a proposal), which are never pruned", s.files, max)
	}
	s.pruneAt = s.files + max/16
	if err != nil {
		s.log.Error("selfimprove: cannot prune agent files", "error", err)
		if s.opts.OnError != nil {
			s.opts.OnError(err)
		}
	}
}

// prune deletes the agent files saved longest ago until keep are left,
// passing over the files of agents with history (withHistory); s.filesMu
// is held.
func (s *FileStore) prune(keep int) error {
	ents, err := s.fs.ReadDir(s.agents)
	if err != nil {
		return err
	}
	type file struct {
		name string
		mod  time.Time
	}
	var all []file
	for _, e := range ents {
		if !isAgentFile(e.Name()) {
			continue
		}
		if fi, err := s.fs.Lstat(filepath.Join(s.agents, e.Name())); err == nil {
			all = append(all, file{e.Name(), fi.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b file) int { return a.mod.Compare(b.mod) })
	var errs []error
	removed, over := 0, len(all)-keep
	seen := make(map[string]keptMark, len(all))
	i := 0
	for ; i < len(all) && removed < over; i++ {
		f := all[i]
		if s.kept(f.name, f.mod, seen) {
			continue
		}
		if err := s.fs.Remove(filepath.Join(s.agents, f.name)); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(seen, f.name)
		removed++
	}
	for _, f := range all[i:] { // the files not read this time keep their marks
		if m, ok := s.keptMarks[f.name]; ok {
			seen[f.name] = m
		}
	}
	s.keptMarks = seen
	s.files = len(all) - removed
	if removed > 0 {
		s.idx.touch()
		errs = append(errs, s.fs.SyncDir(s.agents))
	}
	return errors.Join(errs...)
}

// keptMark is what prune learnt of an agent file: whether the agent has
// history, as of the file's modification time.
type keptMark struct {
	mod  time.Time
	keep bool
}

// kept reports whether the agent file name (modified at mod) holds an
// agent with history, reading it only when prune has not read it since it
// was last written; the answer goes into seen. A file that cannot be read
// or parsed is not kept on this account.
func (s *FileStore) kept(name string, mod time.Time, seen map[string]keptMark) bool {
	if m, ok := s.keptMarks[name]; ok && m.mod.Equal(mod) {
		seen[name] = m
		return m.keep
	}
	data, err := fsx.ReadRegular(s.fs, filepath.Join(s.agents, name), maxStateFile)
	keep := err == nil && withHistory(data)
	seen[name] = keptMark{mod, keep}
	return keep
}

// withHistory reports whether a state file holds an agent whose loss a
// user would notice: its config was ever changed (by the strategy or an
// operator), or it has an operator setting (threshold, critical,
// propose-only), a proposal, a rejected tweak, or a change under
// verification. An agent that only made calls has none.
func withHistory(data []byte) bool {
	var d struct {
		MaxVersion  int64             `json:"max_version"`
		Threshold   json.RawMessage   `json:"threshold"`
		Critical    bool              `json:"critical"`
		ProposeOnly bool              `json:"propose_only"`
		Proposals   []json.RawMessage `json:"proposals"`
		Rejected    []json.RawMessage `json:"rejected"`
		Verifying   json.RawMessage   `json:"verifying"`
	}
	if json.Unmarshal(data, &d) != nil {
		return false
	}
	null := func(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }
	return d.MaxVersion > 1 || !null(d.Threshold) || d.Critical || d.ProposeOnly ||
		len(d.Proposals) > 0 || len(d.Rejected) > 0 || !null(d.Verifying)
}

// removeTemps removes dir's temporary files of atomic writes
// (".<name>.tmp-<random>") and returns how many it removed.
func removeTemps(fs fsx.FS, dir string) (int, error) {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if name := e.Name(); strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") && !e.IsDir() {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}
