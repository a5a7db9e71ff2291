package selfimprove

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/self-improving-loop/selfimprove/internal/atomicfile"
)

// ErrCorruptState is reported (wrapped, in Report.LoopErr and the log) when
// an agent's state file cannot be parsed or belongs to another agent ID. The
// file is renamed aside with a ".corrupt-<time>" suffix and the agent
// starts afresh; nothing is overwritten.
var ErrCorruptState = errors.New("selfimprove: corrupt agent state")

// stateFormat is the version of the agent state file format.
const stateFormat = 1

// agentState is everything the loop knows about one agent, as stored in
// agents/<name>.json. It is guarded by the agent's mutex while in memory.
type agentState struct {
	Format int `json:"format"`
	// AgentID is readable; AgentIDB64 is exact (JSON cannot carry
	// non-UTF-8 strings) and is the one that is read back.
	AgentID    string `json:"agent_id"`
	AgentIDB64 string `json:"agent_id_b64"`

	Config     Config   `json:"config"`
	History    []Config `json:"history,omitempty"` // backups, newest last, at most maxHistory
	MaxVersion int      `json:"max_version"`

	Verifying *Change  `json:"verifying,omitempty"`
	Verify    counts   `json:"verify"`
	Changes   []Change `json:"changes,omitempty"` // decided changes, newest last, at most maxChanges

	CooldownUntil int64 `json:"cooldown_until_ns,omitempty"` // Unix ns
	// Gen counts the configs installed (applied, rolled back, set): calls
	// are credited to the generation they started under, so that calls in
	// flight across a change never count for the new config.
	Gen uint64 `json:"generation"`

	Manual   *thresholdJSON `json:"threshold,omitempty"`
	Critical bool           `json:"critical,omitempty"`
	Rejected []Tweak        `json:"rejected,omitempty"` // at most maxRejected, oldest first

	Tracker tracker `json:"tracker"`
}

// Bounds on the per-agent lists, so that an agent's memory does not grow
// with its history.
const (
	maxHistory  = 16
	maxChanges  = 16
	maxRejected = 32
)

// appendBounded appends v to s and drops the oldest elements beyond n.
func appendBounded[T any](s []T, v T, n int) []T {
	s = append(s, v)
	if len(s) > n {
		s = append(s[:0:0], s[len(s)-n:]...)
	}
	return s
}

// thresholdJSON is a manual Threshold as stored.
type thresholdJSON struct {
	Failures int          `json:"failures"`
	Window   jsonDuration `json:"window"`
	Cooldown jsonDuration `json:"cooldown"`
}

func newState(id string, cfg Config) agentState {
	return agentState{
		Format:     stateFormat,
		AgentID:    id,
		AgentIDB64: base64.StdEncoding.EncodeToString([]byte(id)),
		Config:     cfg,
		MaxVersion: cfg.Version,
		Tracker:    tracker{Win: window{Width: slotWidth(profiles[len(profiles)-1].threshold.Window)}},
	}
}

// store is the storage seam: load and save agent state, append events.
// Nothing above it knows file names.
type store interface {
	// load returns the stored state of id, or nil when there is none.
	load(id string) (*agentState, error)
	save(st *agentState) error
	appendEvent(e *Event) error
	close() error
}

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

// fileStore keeps state under dir: agents/<fileName>.json and events.jsonl.
type fileStore struct {
	dir    string
	agents string
	now    func() time.Time

	mu     sync.Mutex // guards events and closed
	events *os.File
	closed bool
}

func openFileStore(dir string, now func() time.Time) (*fileStore, error) {
	agents := filepath.Join(dir, "agents")
	if err := os.MkdirAll(agents, 0o700); err != nil {
		return nil, fmt.Errorf("selfimprove: state directory: %w", err)
	}
	ev, err := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("selfimprove: event log: %w", err)
	}
	return &fileStore{dir: dir, agents: agents, now: now, events: ev}, nil
}

func (s *fileStore) load(id string) (*agentState, error) {
	name := fileName(id)
	path := filepath.Join(s.agents, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("selfimprove: read state of agent %q: %w", id, err)
	}
	var st agentState
	err = json.Unmarshal(data, &st)
	if err == nil {
		err = st.check(id)
	}
	if err == nil {
		return &st, nil
	}
	aside := fmt.Sprintf("%s.corrupt-%s", name, s.now().UTC().Format("20060102T150405.000000000Z"))
	if rerr := os.Rename(path, filepath.Join(s.agents, aside)); rerr != nil {
		return nil, fmt.Errorf("%w: agent %q: %v; moving it aside failed: %v", ErrCorruptState, id, err, rerr)
	}
	return nil, fmt.Errorf("%w: agent %q: %v (moved to %s)", ErrCorruptState, id, err, aside)
}

// check validates a decoded state for agent id.
func (st *agentState) check(id string) error {
	raw, err := base64.StdEncoding.DecodeString(st.AgentIDB64)
	switch {
	case err != nil:
		return fmt.Errorf("agent ID: %v", err)
	case string(raw) != id:
		return errors.New("file belongs to another agent ID")
	case st.Format != stateFormat:
		return fmt.Errorf("unknown format %d", st.Format)
	case st.Tracker.Win.Width < minSlot || st.Tracker.Win.Width > maxSlot:
		return errors.New("window width out of range")
	case st.Tracker.Win.Head < 0 || st.Tracker.Win.Head > math.MaxInt64/st.Tracker.Win.Width ||
		st.Tracker.Day.Head < 0 || st.Tracker.Day.Head > math.MaxInt64/int64(daySlot):
		return errors.New("window position out of range")
	case st.Tracker.FailPos >= failRing || st.Tracker.RecPos >= recentRing:
		return errors.New("ring position out of range")
	case st.Verifying != nil && st.Verifying.To.Version != st.Config.Version:
		return errors.New("change under verification is not the current config")
	}
	if err := st.Config.validate(); err != nil {
		return err
	}
	if st.Manual != nil {
		if err := st.Manual.threshold().validate(); err != nil {
			return err
		}
	}
	return nil
}

func (t *thresholdJSON) threshold() Threshold {
	return Threshold{Failures: t.Failures, Window: time.Duration(t.Window), Cooldown: time.Duration(t.Cooldown)}
}

func (s *fileStore) save(st *agentState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("selfimprove: encode state: %w", err)
	}
	if err := atomicfile.Write(s.agents, fileName(st.idBytes()), data, 0o600); err != nil {
		return fmt.Errorf("selfimprove: save state of agent %q: %w", st.AgentID, err)
	}
	return nil
}

// idBytes returns the exact agent ID.
func (st *agentState) idBytes() string {
	raw, err := base64.StdEncoding.DecodeString(st.AgentIDB64)
	if err != nil {
		return st.AgentID
	}
	return string(raw)
}

// appendEvent writes e as one line of events.jsonl and fsyncs it.
func (s *fileStore) appendEvent(e *Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("selfimprove: encode event: %w", err)
	}
	data = append(data, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, err := s.events.Write(data); err != nil {
		return fmt.Errorf("selfimprove: append event: %w", err)
	}
	if err := s.events.Sync(); err != nil {
		return fmt.Errorf("selfimprove: sync event log: %w", err)
	}
	return nil
}

func (s *fileStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.events.Close()
}
