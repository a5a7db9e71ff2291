package selfimprove

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
// file in the agents directory (files set aside as corrupt, temporary
// files, and files that cannot be read or parsed are passed over). A file
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
	return s.idx.ids(s.fs, s.agents, s.refuseFile)
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
// ago when the count passes MaxAgentFiles.
func (s *FileStore) noteNewFile() {
	s.idx.touch()
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	s.files++
	max := s.opts.MaxAgentFiles
	if max < 0 || s.files <= max {
		return
	}
	if err := s.prune(max - max/16); err != nil {
		s.log.Error("selfimprove: cannot prune agent files", "error", err)
		if s.opts.OnError != nil {
			s.opts.OnError(err)
		}
	}
}

// prune deletes the agent files saved longest ago until keep are left;
// s.filesMu is held.
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
	removed := 0
	for _, f := range all[:max(len(all)-keep, 0)] {
		if err := s.fs.Remove(filepath.Join(s.agents, f.name)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	s.files = len(all) - removed
	if removed > 0 {
		s.idx.touch()
		errs = append(errs, s.fs.SyncDir(s.agents))
	}
	return errors.Join(errs...)
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
