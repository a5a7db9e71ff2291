package selfimprove

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/jsonl"
)

// Store keeps what the loop learns: each agent's state, and the logs of
// events and traces. The loop serialises the calls that concern one agent;
// calls about different agents, and appends, may come concurrently. The
// state format belongs to the loop; a Store keeps bytes.
//
// FileStore is the default; RAMStore keeps everything in memory. A
// Store shared by several machines (Redis, a database) implements the same
// five methods. A panic in any method the loop calls is recovered: that
// operation fails with an error wrapping ErrStorePanic (ListAgents'
// panic under Loop.Agents excepted: it runs the caller's loop body).
//
// A Store may also have these optional methods, which the loop finds by a
// type assertion (FileStore and RAMStore have the first three):
//
//   - ListAgents(yield func(agentID string) bool) error calls yield with
//     each agent ID it keeps state for, in no particular order, until
//     yield returns false: Loop.Agents and the admin API's listing then
//     include the agents not loaded.
//   - LoadMeta(name string, decode func(doc []byte) error) error and
//     SaveMeta(name string, doc []byte) error keep small loop-wide
//     documents (LoadMeta's error wraps fs.ErrNotExist when there is none;
//     SaveMeta replaces atomically and durably): the loop keeps there the
//     list of agents that have proposals, so that Proposals and Approve
//     find them after a restart before the agents are loaded.
//   - RecentEvents(n int) ([]Event, error) returns up to n of the newest
//     events, oldest first: New seeds the recent events (Loop.Events,
//     Loop.Subscribe, WithRecentEvents) with them, so that they reach back
//     past a restart. FileStore has it.
type Store interface {
	// LoadAgent reads agentID's state and passes it to decode. It returns
	// an error wrapping fs.ErrNotExist when there is none. When decode
	// fails, the store sets the state aside (it never deletes it) and
	// returns an error wrapping ErrCorruptState.
	LoadAgent(agentID string, decode func(state []byte) error) error
	// SaveAgent replaces agentID's state, atomically and durably.
	SaveAgent(agentID string, state []byte) error
	// AppendEvents adds events to the event log, durably, in order.
	AppendEvents(events []Event) error
	// AppendTraces adds traces to the trace log, durably, in order.
	AppendTraces(traces []Trace) error
	// Close releases the store.
	Close() error
}

// guard runs f, a call of the Store's method op, and returns its error. A
// panic in it (the Store is the user's) is recovered and returned as an
// error wrapping ErrStorePanic, so that it fails the operation, as an
// error would, never the call, the loop's goroutines or its locks.
func guard(op string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w in %s: %v", ErrStorePanic, op, r)
		}
	}()
	return f()
}

// metaStore is implemented by a Store that also keeps small loop-wide
// documents. The loop keeps there the list of agents that have proposals,
// so that Proposals and Approve find them after a restart before the
// agents are loaded. FileStore (as <dir>/<name>.json) and RAMStore
// implement it.
type metaStore interface {
	// LoadMeta reads the document name and passes it to decode; it
	// returns an error wrapping fs.ErrNotExist when there is none.
	LoadMeta(name string, decode func(doc []byte) error) error
	// SaveMeta replaces the document name, atomically and durably.
	SaveMeta(name string, doc []byte) error
}

// eventHistory is implemented by a Store that can return its newest
// events. New seeds the recent events (Loop.Events, Loop.Subscribe,
// WithRecentEvents) with them, so that they reach back past a restart.
// FileStore implements it.
type eventHistory interface {
	// RecentEvents returns up to n of the newest events, oldest first.
	RecentEvents(n int) ([]Event, error)
}

// checkMetaName accepts the names of loop-wide documents: 1 to 64 of
// [a-z0-9-].
func checkMetaName(name string) error {
	ok := name != "" && len(name) <= 64
	for i := 0; i < len(name) && ok; i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("selfimprove: invalid document name %q", name)
	}
	return nil
}

// ReadEvents calls fn with each event in r, an event log (events.jsonl, or
// a decompressed archive). It returns how many lines it skipped: a torn
// last line (a crash during an append), lines that are not an event, and
// lines over 1 MiB.
//
// An event's AgentID is exact: a line of an agent whose ID is not UTF-8
// carries it in agent_id_b64 (docs/format.md), and a line whose
// agent_id_b64 is not a valid agent ID, or not the one its agent_id shows,
// is skipped too.
func ReadEvents(r io.Reader, fn func(Event) error) (skipped int, err error) {
	return readLog(r, func(l *eventLine) (Event, error) {
		id, err := logAgentID(l.AgentID, l.AgentIDB64)
		l.AgentID = id
		return l.Event, err
	}, fn)
}

// ReadTraces is ReadEvents for a trace log (traces.jsonl).
func ReadTraces(r io.Reader, fn func(Trace) error) (skipped int, err error) {
	return readLog(r, func(l *traceLine) (Trace, error) {
		id, err := logAgentID(l.AgentID, l.AgentIDB64)
		l.AgentID = id
		return l.Trace, err
	}, fn)
}

// readLog calls fn with each line of r that decodes as an L and that
// value converts to a T, and returns how many lines it skipped.
func readLog[L, T any](r io.Reader, value func(*L) (T, error), fn func(T) error) (int, error) {
	bad := 0
	skipped, err := jsonl.Read(r, maxLogLine, func(line []byte) error {
		var l L
		if json.Unmarshal(line, &l) != nil {
			bad++
			return nil
		}
		v, err := value(&l)
		if err != nil {
			bad++
			return nil
		}
		return fn(v)
	})
	return skipped + bad, err
}

// marshalLines encodes values as JSON lines.
func marshalLines[T any](vs []T) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i := range vs {
		if err := enc.Encode(&vs[i]); err != nil {
			return nil, fmt.Errorf("selfimprove: encode log line: %w", err)
		}
	}
	return b.Bytes(), nil
}

// maxLogLine bounds a line the log readers accept: longer lines are
// skipped and counted.
const maxLogLine = 1 << 20

// maxStateFile bounds a state file: a larger one is set aside as corrupt,
// and is not written. A real one is a few kilobytes.
const maxStateFile = 4 << 20

// maxMetaFile bounds a loop-wide document other than the memory, such as
// the list of agents with proposals (about 60 bytes an agent): a larger
// one is set aside as corrupt, and is not written.
const maxMetaFile = 16 << 20

// defaultMaxMemoryFile is FileOptions.MaxMemorySize's default. A memory of
// 10,000 clusters with 8 agents each takes about 7 MiB; with 8 fixes each
// too, whose configs have a route and two parameters, about 58 MiB.
const defaultMaxMemoryFile = 96 << 20

// memoryFileBytesPerCluster is what the Loop allows a cluster of a memory
// larger than defaultMaxMemoryFile allows for (MemoryOptions.MaxClusters
// above 12,288): the most measured was 6 KiB.
const memoryFileBytesPerCluster = 8 << 10

// traceWriter hands traces from callers to the store. Callers append to
// buf under mu; one goroutine swaps buf with a spare and writes it.
type traceWriter struct {
	store      Store
	log        *slog.Logger
	m          *metrics
	sync       bool
	maxPending int
	wait       time.Duration

	mu     sync.Mutex
	closed bool
	buf    []Trace
	cur    *traceBatch   // the batch buf will become (sync mode)
	space  chan struct{} // closed when the writer takes buf
	kick   chan struct{} // wakes the writer; capacity 1

	stop chan struct{}
	done chan struct{}
}

func newTraceWriter(s Store, log *slog.Logger, m *metrics, mode TraceMode, maxPending int, wait time.Duration) *traceWriter {
	w := &traceWriter{
		store: s, log: log, m: m, sync: mode == TracesSync,
		maxPending: maxPending, wait: wait,
		buf:   make([]Trace, 0, maxPending),
		space: make(chan struct{}),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	if w.sync {
		w.cur = &traceBatch{done: make(chan struct{})}
	}
	go w.run(make([]Trace, 0, maxPending))
	return w
}

// add hands t to the writer. In batched mode it returns at once unless
// maxPending traces are waiting, when it waits up to w.wait for room; in
// sync mode it returns when t is written. It returns ErrTraceDropped
// (wrapped) when t is lost.
func (w *traceWriter) add(t *Trace) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		err := fmt.Errorf("%w: %w", ErrTraceDropped, ErrClosed)
		w.drop(1, err)
		return err
	}
	if len(w.buf) >= w.maxPending {
		if err := w.waitForRoom(); err != nil {
			w.mu.Unlock()
			w.drop(1, err)
			return err
		}
	}
	w.buf = append(w.buf, *t)
	b := w.cur
	if b != nil || len(w.buf) == traceFlushAt {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	if b == nil {
		return nil
	}
	timer := time.NewTimer(w.wait)
	defer timer.Stop()
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("%w: %w", ErrTraceDropped, b.err)
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: not written within %v", ErrTraceDropped, w.wait)
	}
}

// waitForRoom waits, with w.mu held on entry and on return, until the
// writer takes the pending traces or w.wait passes.
func (w *traceWriter) waitForRoom() error {
	timer := time.NewTimer(w.wait)
	defer timer.Stop()
	for len(w.buf) >= w.maxPending {
		space := w.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-timer.C:
			w.mu.Lock()
			return fmt.Errorf("%w: the trace writer did not keep up within %v", ErrTraceDropped, w.wait)
		case <-w.done:
			w.mu.Lock()
			return fmt.Errorf("%w: %w", ErrTraceDropped, ErrClosed)
		}
		w.mu.Lock()
	}
	return nil
}

func (w *traceWriter) drop(n int, err error) {
	w.m.tracesDropped.Add(int64(n))
	w.log.Warn("selfimprove: traces dropped", "count", n, "error", err)
}

// flush writes the pending traces, if any, and reports whether it did.
func (w *traceWriter) flush(spare *[]Trace) bool {
	w.mu.Lock()
	if len(w.buf) == 0 {
		w.mu.Unlock()
		return false
	}
	batch := w.buf
	w.buf = (*spare)[:0]
	b := w.cur
	if b != nil {
		w.cur = &traceBatch{done: make(chan struct{})}
	}
	close(w.space)
	w.space = make(chan struct{})
	w.mu.Unlock()

	err := guard("AppendTraces", func() error { return w.store.AppendTraces(batch) })
	if err != nil {
		w.m.storeErrors.Add(1)
		w.drop(len(batch), err)
	} else {
		w.m.traces.Add(int64(len(batch)))
	}
	if b != nil {
		b.err = err
		close(b.done)
	}
	clear(batch) // let go of the strings
	*spare = batch[:0]
	return true
}

// close writes what is pending and stops the writer.
func (w *traceWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
}

func (w *traceWriter) run(spare []Trace) {
	defer close(w.done)
	ticker := time.NewTicker(traceFlushEvery)
	defer ticker.Stop()
	for {
		select {
		case <-w.kick:
		case <-ticker.C:
		case <-w.stop:
			for w.flush(&spare) {
			}
			return
		}
		w.flush(&spare)
	}
}

// The memory's bounds (its defaults are DefaultMemoryClusters and
// DefaultMemoryHalfLife).
const (
	maxMemoryAgents = 8
	maxMemoryFixes  = 8
	memoryDoc       = "memory"
	memorySaveEvery = time.Minute // the memory is saved at most this often, and at Close
	memoryFormat    = 1
)
