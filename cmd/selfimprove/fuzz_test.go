package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// FuzzArgs: any command line is split and parsed without a panic; the
// positional arguments keep their order, and only "--" lets through one
// that looks like a flag.
func FuzzArgs(f *testing.F) {
	f.Add("--url\x00U\x00rewind\x00a\x003\x00--reason\x00R")
	f.Add("rewind\x00a\x003\x00--reason=R\x00--json\x00--\x00-x")
	f.Add("similar\x00-k\x00")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		name, rest, err := splitCommand(args)
		if err != nil || name == "" {
			return
		}
		c := lookup(name)
		if c == nil {
			return
		}
		o := &opts{}
		pos, err := parse(newFlagSet(c, o), rest)
		if err != nil {
			return
		}
		dash := slices.Index(rest, "--")
		for _, p := range pos {
			if strings.HasPrefix(p, "-") && p != "-" && dash < 0 {
				t.Errorf("positional %q in %q", p, rest)
			}
		}
		// Order: pos is a subsequence of rest.
		i := 0
		for _, a := range rest {
			if i < len(pos) && a == pos[i] {
				i++
			}
		}
		if i != len(pos) {
			t.Errorf("positionals %q are not in the order of %q", pos, rest)
		}
	})
}

// FuzzEventLog: events -f reads any event log without a panic, consumes
// whole lines only, and finds the events ReadEvents finds in them.
func FuzzEventLog(f *testing.F) {
	f.Add([]byte(`{"id":"1","type":"critical_set","agent_id":"a","time":"2026-03-01T12:00:00Z","message":"m"}` + "\n" + `{"id":"2"`))
	f.Add([]byte("\n\n{}\nnot json\n"))
	// An agent whose ID is not UTF-8: its exact ID in agent_id_b64; then
	// one whose agent_id_b64 is not the ID agent_id shows.
	f.Add([]byte(`{"id":"1","type":"config_set","agent_id":"bot-\ufffd\ufffd","agent_id_b64":"Ym90Lf/+","message":"m"}` + "\n" +
		`{"id":"2","type":"config_set","agent_id":"a","agent_id_b64":"Ym90Lf/+","message":"m"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		c := &client{dir: dir}
		var got []si.Event
		off, err := c.readLog(0, func(e si.Event) { got = append(got, e) })
		if err != nil {
			t.Fatal(err)
		}
		if off > int64(len(data)) || (off > 0 && data[off-1] != '\n') {
			t.Fatalf("offset %d of %d bytes", off, len(data))
		}
		var want []si.Event
		si.ReadEvents(bytes.NewReader(data[:off]), func(e si.Event) error { want = append(want, e); return nil })
		if len(got) != len(want) {
			t.Errorf("%d events, ReadEvents finds %d", len(got), len(want))
		}
		// Read again from the offset: nothing new.
		if off2, _ := c.readLog(off, func(si.Event) { t.Error("an event read twice") }); off2 != off {
			t.Errorf("offset %d then %d", off, off2)
		}
	})
}
