package selfimprove

import (
	"math"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Format 1: the in-memory layout of before, frozen here.

// stateV1 is a format 1 state file.
type stateV1 struct {
	Format           int            `json:"format"`
	AgentID          string         `json:"agent_id"`
	AgentIDB64       string         `json:"agent_id_b64"`
	Config           Config         `json:"config"`
	History          []Config       `json:"history"`
	MaxVersion       int64          `json:"max_version"`
	Verifying        *Change        `json:"verifying"`
	Verify           countsV1       `json:"verify"`
	Control          countsV1       `json:"control"`
	Changes          []Change       `json:"changes"`
	CooldownUntil    int64          `json:"cooldown_until_ns"`
	CircuitOpenUntil int64          `json:"circuit_open_until_ns"`
	Gen              uint64         `json:"generation"`
	Manual           *thresholdJSON `json:"threshold"`
	Critical         bool           `json:"critical"`
	Rejected         []Tweak        `json:"rejected"`
	Tracker          trackerV1      `json:"tracker"`
	Clusters         []clusterV1    `json:"clusters"`
	Proposals        []Proposal     `json:"proposals"`
}

type countsV1 struct {
	Calls    int64 `json:"calls"`
	Failures int64 `json:"failures"`
	Latency  int64 `json:"latency_ns"`
	Consec   int64 `json:"consecutive"`
}

func (c countsV1) doc() countsDoc {
	return countsDoc{Calls: c.Calls, Failures: c.Failures, LatencyNS: c.Latency, ConsecutiveFailures: c.Consec}
}

type trackerV1 struct {
	Win struct {
		Width int64      `json:"width_ns"`
		Head  int64      `json:"head"`
		Slots [64]slotV1 `json:"slots"`
	} `json:"window"`
	Day struct {
		Head  int64      `json:"head"`
		Slots [96]uint16 `json:"slots"`
	} `json:"day"`
	FailEnd  [64]int64        `json:"fail_end"`
	FailGen  [64]uint32       `json:"fail_gen"`
	Recent   [16]failRecordV1 `json:"recent"`
	CallEnd  [16]int64        `json:"call_end"`
	CallDur  [16]int64        `json:"call_dur"`
	CallFail uint16           `json:"call_fail"`
	CallPos  uint8            `json:"call_pos"`
	FailPos  uint8            `json:"fail_pos"`
	RecPos   uint8            `json:"recent_pos"`
	Consec   int64            `json:"consecutive"`
	Total    int64            `json:"total"`
	Ignored  int64            `json:"ignored"`
}

type slotV1 struct {
	Calls    uint32 `json:"c"`
	Failures uint32 `json:"f"`
	Latency  int64  `json:"l"`
}

type failRecordV1 struct {
	End     int64  `json:"e"`
	Dur     int64  `json:"d"`
	Err     string `json:"err"`
	Version int32  `json:"v"`
	Cl      uint32 `json:"cl"`
}

type clusterV1 struct {
	ID       uint64        `json:"id,string"`
	Sig      string        `json:"sig"`
	Class    failure.Class `json:"class"`
	Total    int64         `json:"total"`
	First    int64         `json:"first"`
	Last     int64         `json:"last"`
	Examples [2]string     `json:"examples"`
	Width    int64         `json:"width_ns"`
	Head     int64         `json:"head"`
	Slots    [8]uint32     `json:"slots"`
}

// doc converts a format 1 file to a format 2 document, to be checked as
// one.
func (v *stateV1) doc() (stateDoc, error) {
	d := stateDoc{
		Format:     stateFormatV1,
		AgentID:    v.AgentID,
		AgentIDB64: v.AgentIDB64,
		Config:     v.Config,
		History:    v.History,
		MaxVersion: v.MaxVersion,
		Generation: int64(min(v.Gen, math.MaxInt64)),
		Verifying:  v.Verifying,
		Verify:     v.Verify.doc(),
		Control:    v.Control.doc(),
		Changes:    v.Changes,
		Threshold:  v.Manual,
		Critical:   v.Critical,
		Rejected:   v.Rejected,
		Proposals:  v.Proposals,
	}
	var err error
	if d.CooldownUntil, err = optTimeToDoc(path("cooldown_until_ns"), v.CooldownUntil); err != nil {
		return d, err
	}
	if d.CircuitOpenUntil, err = optTimeToDoc(path("circuit_open_until_ns"), v.CircuitOpenUntil); err != nil {
		return d, err
	}
	t := &v.Tracker
	r := ringsView{
		width: t.Win.Width, head: t.Win.Head, slots: make([]slot, len(t.Win.Slots)),
		dayHead: t.Day.Head, day: t.Day.Slots[:],
		failEnd: t.FailEnd[:], failGen: t.FailGen[:], failPos: int(t.FailPos),
		recent: make([]failRecord, len(t.Recent)), recPos: int(t.RecPos),
		callEnd: t.CallEnd[:], callDur: t.CallDur[:], callFailed: make([]bool, len(t.CallEnd)), callPos: int(t.CallPos),
		consec: t.Consec, total: t.Total, ignored: t.Ignored,
	}
	for i, s := range t.Win.Slots {
		r.slots[i] = slot(s)
	}
	for i, f := range t.Recent {
		r.recent[i] = failRecord(f)
	}
	for i := range r.callFailed {
		r.callFailed[i] = t.CallFail&(1<<i) != 0
	}
	clusters := make([]clusterRec, len(v.Clusters))
	for i, c := range v.Clusters {
		clusters[i] = clusterRec{ID: c.ID}
	}
	name := (&agentState{Clusters: clusters}).clusterName
	if d.Calls, err = callsToDoc(r, false, name); err != nil {
		return d, err
	}
	for i := range v.Clusters {
		c := &v.Clusters[i]
		cd, err := clusterToDoc(elem("clusters", i), c.ID, c.Sig, c.Class, c.Total, c.First, c.Last, c.Examples, c.Width, c.Head, c.Slots[:])
		if err != nil {
			return d, err
		}
		d.Clusters = append(d.Clusters, cd)
	}
	return d, nil
}
