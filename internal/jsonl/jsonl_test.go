package jsonl

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/self-improving-loop/selfimprove/internal/fsx"
)

func readAll(t *testing.T, in string, maxLine int) ([]string, int) {
	t.Helper()
	var got []string
	skipped, err := Read(strings.NewReader(in), maxLine, func(line []byte) error {
		got = append(got, string(line))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, skipped
}

func TestRead(t *testing.T) {
	long := `{"x":"` + strings.Repeat("a", 200) + `"}`
	tests := []struct {
		name    string
		in      string
		want    []string
		skipped int
	}{
		{"empty", "", nil, 0},
		{"two lines", "{\"a\":1}\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, 0},
		{"torn last line", "{\"a\":1}\n{\"b\":", []string{`{"a":1}`}, 1},
		{"complete last line without newline is torn", "{\"a\":1}\n{\"b\":2}", []string{`{"a":1}`}, 1},
		{"not JSON", "{\"a\":1}\nhello\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, 1},
		{"NUL bytes", "\x00\x00\n{\"a\":1}\n", []string{`{"a":1}`}, 1},
		{"blank lines", "\n\n{\"a\":1}\n\n", []string{`{"a":1}`}, 0},
		{"over-long line", long + "\n{\"a\":1}\n", []string{`{"a":1}`}, 1},
		{"over-long torn line", "{\"a\":1}\n" + long, []string{`{"a":1}`}, 1},
		{"two torn halves joined", "{\"a\":{\"a\":1}\n", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := readAll(t, tt.in, 100)
			if diff := cmp.Diff(tt.want, got); diff != "" || skipped != tt.skipped {
				t.Errorf("lines (-want +got):\n%s\nskipped %d, want %d", diff, skipped, tt.skipped)
			}
		})
	}
}

func TestReadHugeLineBeyondBuffer(t *testing.T) {
	huge := `{"x":"` + strings.Repeat("b", 200_000) + `"}`
	got, skipped := readAll(t, huge+"\n{\"a\":1}\n", 1<<20)
	if len(got) != 2 || got[0] != huge || skipped != 0 {
		t.Fatalf("got %d lines, skipped %d", len(got), skipped)
	}
	got, skipped = readAll(t, huge+"\n{\"a\":1}\n", 1000)
	if len(got) != 1 || skipped != 1 {
		t.Fatalf("with a 1000-byte limit: got %d lines, skipped %d", len(got), skipped)
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":"), 100)
	f.Add([]byte("\x00\n\n[1,2]\n\"s\"\n"), 3)
	f.Add([]byte(strings.Repeat("x", 5000)+"\n{}\n"), 10)
	f.Fuzz(func(t *testing.T, data []byte, maxLine int) {
		maxLine = max(1, min(maxLine, 1<<16))
		lines := 0
		skipped, err := Read(bytes.NewReader(data), maxLine, func(line []byte) error {
			lines++
			if !json.Valid(line) || len(line) > maxLine || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("bad line passed: %q", line)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(data, []byte("\n")) + 1; lines+skipped > n {
			t.Fatalf("%d lines + %d skipped from %d newline-separated parts", lines, skipped, n)
		}
	})
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestLogRotatesCompressesAndPrunes(t *testing.T) {
	dir := t.TempDir()
	now := t0
	var bgErr error
	l, err := Open(fsx.OS{}, dir, "events", 1000, 2, func() time.Time { now = now.Add(time.Second); return now }, func(err error) { bgErr = err })
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(`{"n":"` + strings.Repeat("x", 91) + `"}` + "\n") // 100 bytes: 10 fill a file
	for range 55 {
		if err := l.Append(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil || bgErr != nil {
		t.Fatal(err, bgErr)
	}
	arch, err := Archives(fsx.OS{}, dir, "events")
	if err != nil {
		t.Fatal(err)
	}
	if len(arch) != 2 {
		t.Fatalf("archives = %v, want the newest 2 of 5", arch)
	}
	for _, a := range arch {
		if !strings.HasSuffix(a, ".jsonl.gz") {
			t.Fatalf("archive %s not compressed", a)
		}
		f, _ := os.Open(filepath.Join(dir, a))
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(zr)
		f.Close()
		got, skipped := readAll(t, string(data), 1000)
		if len(got) != 10 || skipped != 0 {
			t.Errorf("archive %s: %d lines, %d skipped", a, len(got), skipped)
		}
	}
	cur, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if got, _ := readAll(t, string(cur), 1000); len(got) != 5 {
		t.Errorf("current file: %d lines, want 5", len(got))
	}
}

func TestLogCutsBackAPartialWrite(t *testing.T) {
	dir := t.TempDir()
	fs := fsx.NewFaulty(fsx.OS{})
	l, err := Open(fs, dir, "traces", 0, 1, time.Now, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("{\"a\":1}\n"))
	fs.Fail(fsx.OpPartial, nil, nil)
	if err := l.Append([]byte("{\"b\":2}\n{\"c\":3}\n")); !fsx.IsNoSpace(err) {
		t.Fatalf("Append = %v, want disk full", err)
	}
	fs.Heal()
	l.Append([]byte("{\"d\":4}\n"))
	l.Close()
	data, _ := os.ReadFile(filepath.Join(dir, "traces.jsonl"))
	got, skipped := readAll(t, string(data), 100)
	if diff := cmp.Diff([]string{`{"a":1}`, `{"d":4}`}, got); diff != "" || skipped != 0 {
		t.Errorf("lines (-want +got):\n%s\nskipped %d", diff, skipped)
	}
}

func TestLogEndsATornLineLeftByACrash(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte("{\"a\":1}\n{\"torn\":"), 0o600)
	l, err := Open(fsx.OS{}, dir, "events", 0, 1, time.Now, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	l.Append([]byte("{\"b\":2}\n"))
	l.Close()
	data, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	got, skipped := readAll(t, string(data), 100)
	if diff := cmp.Diff([]string{`{"a":1}`, `{"b":2}`}, got); diff != "" || skipped != 1 {
		t.Errorf("lines (-want +got):\n%s\nskipped %d, want the torn one", diff, skipped)
	}
}
