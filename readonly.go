package selfimprove

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

// ReadOnlyStore reads a FileStore's directory without locking it and never
// writes there: a tool can read the state of a directory that a live Loop
// holds. Every file is read as a FileStore reads it (a regular file only,
// never more than its bound), and a corrupt one is reported, wrapping
// ErrCorruptState, but left in place. Each document is read whole, so it
// is the old one or the new one, never a mix; different documents may be
// read at different moments of the live Loop.
//
// A Loop opened on it (New(WithStore(s))) answers every getter (Overview,
// Agents, Changes, Proposals, Similar, ExportMemory...) from the
// directory; its mutations fail, wrapping ErrReadOnly, and its Close then
// reports the state it could not save. It implements
// Store, metaStore and agentLister.
type ReadOnlyStore struct {
	fs        fsx.FS
	dir       string
	maxMemory int64
	refused   sync.Map // names of the files of refused IDs, logged
	idx       agentIndex
}

// OpenReadOnlyStore opens dir read-only. It fails, wrapping
// fs.ErrNotExist, when dir does not exist, and when it is not a
// directory. It takes no lock and creates nothing. The failure memory is
// read up to FileOptions' default bound (96 MiB).
func OpenReadOnlyStore(dir string) (*ReadOnlyStore, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("selfimprove: open state directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("selfimprove: open state directory %s: not a directory", dir)
	}
	return &ReadOnlyStore{fs: fsx.OS{}, dir: dir, maxMemory: defaultMaxMemoryFile}, nil
}

// Dir returns the directory the store reads.
func (s *ReadOnlyStore) Dir() string { return s.dir }

// LoadAgent implements Store.
func (s *ReadOnlyStore) LoadAgent(id string, decode func([]byte) error) error {
	if err := s.read(filepath.Join(s.dir, "agents", fileName(id)), maxStateFile, decode); err != nil {
		return fmt.Errorf("selfimprove: read state of agent %q: %w", id, err)
	}
	return nil
}

// LoadMeta implements metaStore.
func (s *ReadOnlyStore) LoadMeta(name string, decode func([]byte) error) error {
	if err := checkMetaName(name); err != nil {
		return err
	}
	limit := int64(maxMetaFile)
	if name == memoryDoc {
		limit = s.maxMemory
	}
	if err := s.read(filepath.Join(s.dir, name+".json"), limit, decode); err != nil {
		return fmt.Errorf("selfimprove: read %s: %w", name, err)
	}
	return nil
}

func (s *ReadOnlyStore) read(path string, limit int64, decode func([]byte) error) error {
	data, err := fsx.ReadRegular(s.fs, path, limit)
	switch {
	case errors.Is(err, fsx.ErrNotRegular), errors.Is(err, fsx.ErrTooLarge):
		return fmt.Errorf("%w: %v", ErrCorruptState, err)
	case err != nil:
		return err
	}
	if err := decode(data); err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptState, err)
	}
	return nil
}

// ListAgents implements agentLister, as FileStore.ListAgents does.
// A file whose agent ID the loop refuses (see FileStore.ListAgents) is
// not listed, and logged as an error (slog.Default), once for each
// store.
func (s *ReadOnlyStore) ListAgents(yield func(agentID string) bool) error {
	ids, err := s.sortedAgentIDs()
	for _, id := range ids {
		if !yield(id) {
			break
		}
	}
	return err
}

// sortedAgentIDs implements sortedLister, from the store's index of the
// agents directory, read again when the directory changed.
func (s *ReadOnlyStore) sortedAgentIDs() ([]string, error) {
	return s.idx.ids(s.fs, filepath.Join(s.dir, "agents"), func(name string, why error) {
		if _, dup := s.refused.LoadOrStore(name, true); !dup {
			slog.Default().Error("selfimprove: a state file holds an agent ID the loop refuses: not listed (a Loop that owns the directory sets it aside)",
				"file", filepath.Join(s.dir, "agents", name), "why", why)
		}
	}, slog.Default())
}

// UnreadableFile is a state file that a ReadOnlyStore cannot read.
type UnreadableFile struct {
	// Path is the file's path.
	Path string
	// Err is why. It wraps ErrCorruptState for a file cut short, not
	// JSON, not a regular file or over its bound, and is the read's
	// error (such as fs.ErrPermission) for a file that cannot be read.
	Err error
}

// UnreadableAgentFiles returns the agents' state files that ListAgents
// passes over because they cannot be read or parsed (their agents' IDs
// cannot be known from them), sorted by path: what a tool shows as
// damaged. It reads the agents directory as ListAgents does, and
// changes nothing there.
func (s *ReadOnlyStore) UnreadableAgentFiles() ([]UnreadableFile, error) {
	if _, err := s.sortedAgentIDs(); err != nil {
		return nil, err
	}
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	out := make([]UnreadableFile, 0, len(s.idx.bad))
	for name, why := range s.idx.bad {
		out = append(out, UnreadableFile{Path: filepath.Join(s.dir, "agents", name), Err: why})
	}
	slices.SortFunc(out, func(a, b UnreadableFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// CheckAgent reads agent id's state file as a Loop on the store reads
// it, and reports what it found: nil when the file can be read, an
// UnreadableFile error wrapping fs.ErrNotExist when there is none, and
// one wrapping ErrCorruptState when it is damaged (cut short, not JSON,
// not a regular file, over its bound, or not this agent's state). A Loop
// shows no agent for the last two.
func (s *ReadOnlyStore) CheckAgent(id string) error {
	path := filepath.Join(s.dir, "agents", fileName(id))
	data, err := fsx.ReadRegular(s.fs, path, maxStateFile)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // UnreadableFile names the file
	}
	switch {
	case errors.Is(err, fsx.ErrNotRegular), errors.Is(err, fsx.ErrTooLarge):
		err = fmt.Errorf("%w: %w", ErrCorruptState, err)
	case err == nil:
		if _, derr := decodeState(data, id); derr != nil {
			err = fmt.Errorf("%w: %w", ErrCorruptState, derr)
		}
	}
	if err != nil {
		return &UnreadableFile{Path: path, Err: err}
	}
	return nil
}

// Error says which file and why.
func (u *UnreadableFile) Error() string {
	return fmt.Sprintf("selfimprove: state file %s cannot be read: %v", u.Path, u.Err)
}

// Unwrap returns Err.
func (u *UnreadableFile) Unwrap() error { return u.Err }

// SaveAgent implements Store: it fails, wrapping ErrReadOnly.
func (s *ReadOnlyStore) SaveAgent(id string, _ []byte) error {
	return fmt.Errorf("selfimprove: save agent %q: %w", id, ErrReadOnly)
}

// SaveMeta implements metaStore: it fails, wrapping ErrReadOnly.
func (s *ReadOnlyStore) SaveMeta(name string, _ []byte) error {
	return fmt.Errorf("selfimprove: save %s: %w", name, ErrReadOnly)
}

// AppendEvents implements Store: it fails, wrapping ErrReadOnly.
func (s *ReadOnlyStore) AppendEvents([]Event) error {
	return fmt.Errorf("selfimprove: append events: %w", ErrReadOnly)
}

// AppendTraces implements Store: it fails, wrapping ErrReadOnly.
func (s *ReadOnlyStore) AppendTraces([]Trace) error {
	return fmt.Errorf("selfimprove: append traces: %w", ErrReadOnly)
}

// Close implements Store; it has nothing to release.
func (s *ReadOnlyStore) Close() error { return nil }
