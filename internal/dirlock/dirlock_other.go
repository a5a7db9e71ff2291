//go:build !unix

package dirlock

import (
	"fmt"
	"os"
	"sync"
)

// Without flock, the lock holds within this process only: a map of the
// lock files held.
var (
	mu   sync.Mutex
	held = map[string]bool{}
)

func lock(f *os.File) error {
	mu.Lock()
	defer mu.Unlock()
	if held[f.Name()] {
		return fmt.Errorf("%w: %s", ErrLocked, f.Name())
	}
	held[f.Name()] = true
	return nil
}

func unlock(f *os.File) error {
	mu.Lock()
	defer mu.Unlock()
	delete(held, f.Name())
	return nil
}
