package selfimprove

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/dirlock"
	"github.com/self-improving-loop/selfimprove/internal/fsx"
	"github.com/self-improving-loop/selfimprove/internal/jsonl"
)

// FileOptions configures a FileStore. The zero value takes the defaults.
type FileOptions struct {
	// MaxLogSize is the size at which events.jsonl and traces.jsonl are
	// rotated into gzip archives. Default 64 MiB; negative: never.
	MaxLogSize int64
	// KeepArchives is how many archives of each log are kept; older ones
	// are deleted. Default (0) 5; negative is refused.
	KeepArchives int
	// Clock dates corrupt files and archives. Default: the real clock.
	Clock Clock
	// Logger receives failures of background work (rotating, compressing
	// and pruning archives). Default slog.Default().
	Logger *slog.Logger
	// OnError, if set, is also called with each such failure (the Loop
	// counts them in Metrics.StoreErrors).
	OnError func(error)
	// MaxMemorySize bounds the failure memory's document, memory.json,
	// read or written. Default (0) 96 MiB; negative is refused. A full
	// memory of 10,000 clusters
	// (the default MemoryOptions.MaxClusters) takes 7 to 60 MiB, by how
	// many fixes it remembers and how large their configs are. A Loop
	// that opens its own FileStore raises it to 8 KiB a cluster for a
	// MemoryOptions.MaxClusters above 12,288.
	MaxMemorySize int64
	// MaxAgentFiles bounds the agent state files kept in agents/. When a
	// new agent's file takes the count over it, the files saved longest
	// ago (the agents idle longest) are deleted, a sixteenth of the bound
	// at a time, passing over agents with history: a config ever changed
	// (by the strategy or an operator), an operator setting (threshold,
	// critical, propose-only), a proposal, a rejected tweak or a change
	// under verification. Those are never deleted; when they alone fill
	// the bound, the count goes over it and each sixteenth more is
	// reported (logged, OnError). Default 100,000; negative: no bound. An
	// agent whose file was deleted starts afresh on its next call.
	MaxAgentFiles int
}

// check refuses settings that have no meaning: a negative KeepArchives or
// MaxMemorySize (a negative MaxLogSize or MaxAgentFiles means no bound).
func (o FileOptions) check() error {
	switch {
	case o.KeepArchives < 0:
		return fmt.Errorf("%w: FileOptions.KeepArchives: %d is negative (0: the default, 5)", ErrInvalidOption, o.KeepArchives)
	case o.MaxMemorySize < 0:
		return fmt.Errorf("%w: FileOptions.MaxMemorySize: %d is negative (0: the default, 96 MiB)", ErrInvalidOption, o.MaxMemorySize)
	}
	return nil
}

// FileStore keeps the loop's state in a directory, which it locks while
// open (an advisory lock that the kernel releases when the process dies):
//
//	<dir>/agents/<safe-name>.json   one agent's state, replaced atomically
//	<dir>/events.jsonl              the event log, fsynced on every append
//	<dir>/traces.jsonl              the trace log, written only when traces are on
//	<dir>/<log>-<UTC time>.jsonl.gz rotated archives
//	<dir>/.lock                     the lock file
//	<dir>/<name>.json               the loop's documents: the failure memory, the agents with
//	                                proposals, the secret of call IDs
//
// Every state file is written to a temporary file, fsynced, renamed into
// place, and the directory fsynced: a rename replaces a link at the name,
// never its target. A log append that fails is cut back, so no partial
// line is left behind.
//
// A file is read or appended to only if it is a regular file: a symbolic
// link is never followed (nor its target created) and a named pipe or
// device is never opened, let alone waited on; and it is read only up to
// a bound, never whole when larger. What the store does with anything else
// at one of its names:
//
//   - agents/<safe-name>.json: a link, a pipe or a file over 4 MiB is
//     set aside (renamed, the link itself and not its target, with a
//     ".corrupt-<time>" suffix) like a file that does not parse:
//     LoadAgent returns an error wrapping ErrCorruptState and the agent
//     starts afresh.
//   - <name>.json, the loop-wide documents of LoadMeta (memory.json,
//     proposal-agents.json): the same, with the bounds MaxMemorySize
//     (memory.json) and 16 MiB (the others). The loop logs the error and
//     starts that document afresh; what was there is kept, set aside. A
//     document larger than its bound is never written either: SaveMeta
//     refuses it, keeping the last one saved, as SaveAgent refuses a
//     state over 4 MiB.
//   - events.jsonl: OpenFileStore fails, with an error naming the file
//     and what it is ("not a regular file (symlink)"): the event log is
//     what the loop reports to, and is left for the operator to look at.
//   - traces.jsonl: each AppendTraces fails with that error; the loop
//     counts the traces dropped and goes on.
//   - archives (<log>-<UTC time>.jsonl, not yet compressed) are not
//     compressed (the failure goes to Logger and OnError); compressed
//     ones are never read. Pruning removes a link, not its target.
//   - .lock: OpenFileStore fails, naming it.
type FileStore struct {
	fs     fsx.FS
	dir    string
	agents string
	now    func() time.Time
	log    *slog.Logger
	lock   *dirlock.Lock

	events *jsonl.Log
	traces *jsonl.Log
	opts   FileOptions

	mu     sync.Mutex // guards traces (opened on first use) and closed
	closed bool

	// wmu admits writes (read-locked around each) until Close seals the
	// store (write-locked): after Close returns, nothing is written.
	wmu    sync.RWMutex
	sealed bool

	filesMu   sync.Mutex          // guards files, pruneAt and keptMarks; held while pruning
	files     int                 // agent state files in agents/
	pruneAt   int                 // prune again only past this many files
	keptMarks map[string]keptMark // what the last prune read of the files it kept
	idx       agentIndex          // the agents' IDs, for ListAgents

	traceMu  sync.Mutex // guards traceBuf and traceEnc, reused by every trace append
	traceBuf []byte
	traceEnc traceEncoder
}

// OpenFileStore opens (creating it if needed) and locks dir. It fails with
// an error wrapping ErrLocked when another FileStore has it open.
func OpenFileStore(dir string, o FileOptions) (*FileStore, error) {
	return openFileStore(fsx.OS{}, dir, o)
}

func openFileStore(fs fsx.FS, dir string, o FileOptions) (*FileStore, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.MaxLogSize == 0 {
		o.MaxLogSize = 64 << 20
	}
	if o.KeepArchives == 0 {
		o.KeepArchives = 5
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxMemorySize == 0 {
		o.MaxMemorySize = defaultMaxMemoryFile
	}
	if o.MaxAgentFiles == 0 {
		o.MaxAgentFiles = defaultMaxAgentFiles
	}
	agents := filepath.Join(dir, "agents")
	if err := fs.MkdirAll(agents, 0o700); err != nil {
		return nil, fmt.Errorf("selfimprove: state directory: %w", err)
	}
	lock, err := dirlock.Acquire(dir, ".lock")
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("selfimprove: lock state directory: %w", err)
	}
	s := &FileStore{fs: fs, dir: dir, agents: agents, now: o.Clock.Now, log: o.Logger, lock: lock, opts: o}
	// With the lock held nobody is writing here: temporary files are what
	// a crash left of an atomic write, never read, and can go.
	for _, d := range []string{dir, agents} {
		if n, err := removeTemps(fs, d); err != nil {
			s.log.Warn("selfimprove: cannot remove temporary files", "dir", d, "error", err)
		} else if n > 0 {
			s.log.Info("selfimprove: removed temporary files left by a crash", "dir", d, "count", n)
		}
	}
	if _, err := fs.Lstat(filepath.Join(agents, emptyIDFile)); err == nil {
		s.refuseFile(emptyIDFile, fmt.Errorf("%w: empty", ErrInvalidAgentID))
	}
	if s.files, err = countAgentFiles(fs, agents); err != nil {
		lock.Release()
		return nil, fmt.Errorf("selfimprove: agents directory: %w", err)
	}
	s.events, err = s.openLog("events")
	if err != nil {
		lock.Release()
		return nil, fmt.Errorf("selfimprove: event log: %w", err)
	}
	return s, nil
}

// write admits one write, refused once Close has sealed the store.
func (s *FileStore) write() error {
	s.wmu.RLock()
	if s.sealed {
		s.wmu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *FileStore) openLog(name string) (*jsonl.Log, error) {
	return jsonl.Open(s.fs, s.dir, name, s.opts.MaxLogSize, s.opts.KeepArchives, s.now, func(err error) {
		s.log.Error("selfimprove: log maintenance failed", "error", err)
		if s.opts.OnError != nil {
			s.opts.OnError(err)
		}
	})
}

// LoadAgent implements Store. A state file that is not a regular file or
// is larger than 4 MiB is set aside like one that does not decode.
func (s *FileStore) LoadAgent(id string, decode func([]byte) error) error {
	name := fileName(id)
	derr, err := s.load(s.agents, name, maxStateFile, decode)
	if err != nil {
		return fmt.Errorf("selfimprove: read state of agent %q: %w", id, err)
	}
	if derr == nil {
		return nil
	}
	aside, err := s.setAside(s.agents, name)
	if err != nil {
		return fmt.Errorf("%w: agent %q: %v; moving it aside failed: %v", ErrCorruptState, id, derr, err)
	}
	return fmt.Errorf("%w: agent %q: %v (moved to %s)", ErrCorruptState, id, derr, aside)
}

// load reads dir/name, a regular file of at most limit bytes, and decodes
// it. derr is the reason the file is corrupt: it is not a regular file, is
// too large, or does not decode; err is a failure to read it (it does not
// exist, an I/O error).
func (s *FileStore) load(dir, name string, limit int64, decode func([]byte) error) (derr, err error) {
	data, err := fsx.ReadRegular(s.fs, filepath.Join(dir, name), limit)
	switch {
	case errors.Is(err, fsx.ErrNotRegular), errors.Is(err, fsx.ErrTooLarge):
		return err, nil
	case err != nil:
		return nil, err
	}
	return decode(data), nil
}

// setAside renames dir/name (a link itself, not its target) to
// name.corrupt-<time> and returns the new name.
func (s *FileStore) setAside(dir, name string) (string, error) {
	aside := fmt.Sprintf("%s.corrupt-%s", name, s.now().UTC().Format("20060102T150405.000000000Z"))
	return aside, s.fs.Rename(filepath.Join(dir, name), filepath.Join(dir, aside))
}

// SaveAgent implements Store. A state larger than 4 MiB, which LoadAgent
// would set aside, is refused and the saved one kept.
func (s *FileStore) SaveAgent(id string, state []byte) error {
	if len(state) > maxStateFile {
		return fmt.Errorf("selfimprove: save state of agent %q: %d bytes, more than a state file may be (%d)", id, len(state), maxStateFile)
	}
	if err := s.write(); err != nil {
		return err
	}
	defer s.wmu.RUnlock()
	name := fileName(id)
	_, err := s.fs.Lstat(filepath.Join(s.agents, name))
	isNew := errors.Is(err, fs.ErrNotExist)
	if err := fsx.WriteAtomic(s.fs, s.agents, name, state); err != nil {
		return fmt.Errorf("selfimprove: save state of agent %q: %w", id, err)
	}
	if isNew {
		s.noteNewFile()
	}
	return nil
}

// LoadMeta implements metaStore: the document is <dir>/<name>.json. One
// that is not a regular file, is larger than its bound (MaxMemorySize for
// the memory, 16 MiB for others) or does not decode is set aside (renamed
// to <name>.json.corrupt-<time>) and the error wraps ErrCorruptState.
func (s *FileStore) LoadMeta(name string, decode func([]byte) error) error {
	if err := checkMetaName(name); err != nil {
		return err
	}
	file := name + ".json"
	derr, err := s.load(s.dir, file, s.metaLimit(name), decode)
	if err != nil {
		return fmt.Errorf("selfimprove: read %s: %w", name, err)
	}
	if derr == nil {
		return nil
	}
	aside, err := s.setAside(s.dir, file)
	if err != nil {
		return fmt.Errorf("%w: %s: %v; moving it aside failed: %v", ErrCorruptState, name, derr, err)
	}
	return fmt.Errorf("%w: %s: %v (moved to %s)", ErrCorruptState, name, derr, aside)
}

// SaveMeta implements metaStore. A document larger than its bound, which
// LoadMeta would set aside, is refused and the saved one kept.
func (s *FileStore) SaveMeta(name string, doc []byte) error {
	if err := checkMetaName(name); err != nil {
		return err
	}
	if limit := s.metaLimit(name); int64(len(doc)) > limit {
		return fmt.Errorf("selfimprove: save %s: %d bytes, more than the document may be (%d)", name, len(doc), limit)
	}
	if err := s.write(); err != nil {
		return err
	}
	defer s.wmu.RUnlock()
	if err := fsx.WriteAtomic(s.fs, s.dir, name+".json", doc); err != nil {
		return fmt.Errorf("selfimprove: save %s: %w", name, err)
	}
	return nil
}

// metaLimit is the bound on the document name.
func (s *FileStore) metaLimit(name string) int64 {
	if name == memoryDoc {
		return s.opts.MaxMemorySize
	}
	return maxMetaFile
}

// AppendEvents implements Store.
func (s *FileStore) AppendEvents(events []Event) error {
	lines := make([]eventLine, len(events))
	for i := range events {
		lines[i] = eventLine{Event: events[i], AgentIDB64: logIDB64(events[i].AgentID)}
	}
	data, err := marshalLines(lines)
	if err != nil {
		return err
	}
	if err := s.write(); err != nil {
		return err
	}
	defer s.wmu.RUnlock()
	if err := s.events.Append(data); err != nil {
		return fmt.Errorf("selfimprove: append to the event log: %w", err)
	}
	return nil
}

// AppendTraces implements Store.
func (s *FileStore) AppendTraces(traces []Trace) error {
	s.mu.Lock()
	if s.traces == nil && !s.closed {
		l, err := s.openLog("traces")
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("selfimprove: trace log: %w", err)
		}
		s.traces = l
	}
	l := s.traces
	s.mu.Unlock()
	if l == nil {
		return ErrClosed
	}
	if err := s.write(); err != nil {
		return err
	}
	defer s.wmu.RUnlock()
	s.traceMu.Lock()
	defer s.traceMu.Unlock()
	buf := s.traceBuf[:0]
	for i := range traces {
		buf = s.traceEnc.appendJSON(buf, &traces[i])
	}
	s.traceBuf = buf
	if err := l.Append(buf); err != nil {
		return fmt.Errorf("selfimprove: append to the trace log: %w", err)
	}
	return nil
}

// Close waits for the writes under way, refuses any later one with
// ErrClosed, closes the logs (waiting for archives being compressed) and
// releases the directory lock. After it returns, the store writes
// nothing.
func (s *FileStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	traces := s.traces
	s.mu.Unlock()
	s.wmu.Lock()
	s.sealed = true
	s.wmu.Unlock()
	errs := []error{s.events.Close()}
	if traces != nil {
		errs = append(errs, traces.Close())
	}
	errs = append(errs, s.lock.Release())
	return errors.Join(errs...)
}

// recentEventsTail is how much of the end of events.jsonl RecentEvents
// reads at most.
const recentEventsTail = 4 << 20

// RecentEvents implements eventHistory: up to n of the newest events of
// the current event log (events.jsonl, not its archives), oldest first,
// read from its last 4 MiB at most.
func (s *FileStore) RecentEvents(n int) ([]Event, error) {
	f, err := s.fs.OpenRegular(filepath.Join(s.dir, "events.jsonl"), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("selfimprove: recent events: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("selfimprove: recent events: %w", err)
	}
	off := max(fi.Size()-recentEventsTail, 0)
	if sk, ok := f.(io.Seeker); ok {
		_, err = sk.Seek(off, io.SeekStart)
	} else {
		_, err = io.CopyN(io.Discard, f, off)
	}
	if err != nil {
		return nil, fmt.Errorf("selfimprove: recent events: %w", err)
	}
	r := bufio.NewReader(io.LimitReader(f, recentEventsTail))
	if off > 0 { // the first line is cut: skip it
		if _, err := r.ReadString('\n'); err != nil {
			return nil, nil
		}
	}
	var evs []Event
	_, err = ReadEvents(r, func(e Event) error {
		if len(evs) == 2*n { // keep the newest n, amortised
			evs = append(evs[:0], evs[n:]...)
		}
		evs = append(evs, e)
		return nil
	})
	evs = evs[max(len(evs)-n, 0):]
	if err != nil {
		return evs, fmt.Errorf("selfimprove: recent events: %w", err)
	}
	return evs, nil
}
