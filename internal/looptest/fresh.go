package looptest

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// freshEnv marks the child process FreshProcess starts.
const freshEnv = "SELFIMPROVE_FRESH_PROCESS"

// FreshProcess runs the top-level test t again, alone, in a child
// process of the test binary, and reports true in the parent, which
// returns at once (t fails there if the child failed); in the child it
// reports false and the test runs. For what a process turns on once and
// for good: the places for a cost that an AddCost no Loop can book turns
// on in every Loop (the price integrations do it when they are built).
func FreshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshEnv) != "" {
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), freshEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("%s in a fresh process: %v\n%s", t.Name(), err, out)
	}
	return true
}
