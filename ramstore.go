package selfimprove

import (
	"bytes"
	"fmt"
	"io/fs"
	"slices"
	"sync"
)

// RAMStore keeps the loop's state and logs in RAM, nothing on disk: for
// tests, and for users who want no disk (WithStore(NewRAMStore())). It keeps the last MaxLog events and the last MaxLog
// traces (default 10,000 each), and sets aside (keeps, unserved) a state
// the loop cannot decode. The zero value is ready to use.
type RAMStore struct {
	// MaxLog bounds the events and the traces kept. Default 10,000.
	MaxLog int

	mu      sync.Mutex
	states  map[string][]byte
	corrupt map[string][]byte // states set aside, by agent ID (the last one)
	meta    map[string][]byte
	events  []Event
	traces  []Trace
}

// NewRAMStore returns an empty RAMStore.
func NewRAMStore() *RAMStore { return &RAMStore{} }

// LoadAgent implements Store.
func (m *RAMStore) LoadAgent(id string, decode func([]byte) error) error {
	m.mu.Lock()
	data, ok := m.states[id]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("selfimprove: agent %q: %w", id, fs.ErrNotExist)
	}
	if err := decode(data); err != nil {
		m.mu.Lock()
		if m.corrupt == nil {
			m.corrupt = map[string][]byte{}
		}
		m.corrupt[id] = data
		delete(m.states, id)
		m.mu.Unlock()
		return fmt.Errorf("%w: agent %q: %v (set aside)", ErrCorruptState, id, err)
	}
	return nil
}

// SaveAgent implements Store.
func (m *RAMStore) SaveAgent(id string, state []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.states == nil {
		m.states = map[string][]byte{}
	}
	m.states[id] = bytes.Clone(state)
	return nil
}

// LoadMeta implements metaStore.
func (m *RAMStore) LoadMeta(name string, decode func([]byte) error) error {
	if err := checkMetaName(name); err != nil {
		return err
	}
	m.mu.Lock()
	data, ok := m.meta[name]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("selfimprove: %s: %w", name, fs.ErrNotExist)
	}
	if err := decode(data); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorruptState, name, err)
	}
	return nil
}

// SaveMeta implements metaStore.
func (m *RAMStore) SaveMeta(name string, doc []byte) error {
	if err := checkMetaName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.meta == nil {
		m.meta = map[string][]byte{}
	}
	m.meta[name] = bytes.Clone(doc)
	return nil
}

// AppendEvents implements Store.
func (m *RAMStore) AppendEvents(events []Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = appendLog(m.events, events, m.max())
	return nil
}

// AppendTraces implements Store.
func (m *RAMStore) AppendTraces(traces []Trace) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.traces = appendLog(m.traces, traces, m.max())
	return nil
}

func (m *RAMStore) max() int {
	if m.MaxLog > 0 {
		return m.MaxLog
	}
	return 10_000
}

func appendLog[T any](log, add []T, n int) []T {
	log = append(log, add...)
	if len(log) > n {
		log = append(log[:0:0], log[len(log)-n:]...)
	}
	return log
}

// Events returns the events kept, oldest first.
func (m *RAMStore) Events() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

// Traces returns the traces kept, oldest first.
func (m *RAMStore) Traces() []Trace {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.traces)
}

// Close implements Store; a RAMStore keeps its content.
func (m *RAMStore) Close() error { return nil }

// ListAgents implements agentLister.
func (m *RAMStore) ListAgents(yield func(agentID string) bool) error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.states))
	for id := range m.states {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		if !yield(id) {
			break
		}
	}
	return nil
}
