package selfimprove_test

import (
	"errors"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// Issue 43, item 7: New refuses WithDir("") (an unset environment
// variable would otherwise put the state in the default directory
// unnoticed) and WithDir beside WithStore (one of them was silently
// ignored), and its errors name the package once. Before, both were
// accepted, and an invalid default config read "selfimprove: invalid
// option: WithDefaultConfig: selfimprove: invalid config: ...".
func TestNewRefusesContradictions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []si.Option
		want []error
		text string
	}{
		{"empty dir", []si.Option{si.WithDir("")}, []error{si.ErrInvalidOption}, "WithDir: empty directory"},
		{"dir and store", []si.Option{si.WithDir(t.TempDir()), si.WithStore(si.NewRAMStore())}, []error{si.ErrInvalidOption}, "WithDir: given with WithStore"},
		{"store and dir", []si.Option{si.WithStore(si.NewRAMStore()), si.WithDir(t.TempDir())}, []error{si.ErrInvalidOption}, "WithDir: given with WithStore"},
		{"bad default config", []si.Option{si.WithStore(si.NewRAMStore()), si.WithDefaultConfig(si.Config{MaxAttempts: -1})},
			[]error{si.ErrInvalidOption, si.ErrInvalidConfig}, "selfimprove: invalid option: WithDefaultConfig: invalid config: config.max_attempts"},
	} {
		_, err := si.New(append(c.opts, si.WithNotifier(nil), si.WithLogger(quiet))...)
		if err == nil {
			t.Errorf("%s: New accepted it", c.name)
			continue
		}
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v does not wrap %v", c.name, err, w)
			}
		}
		if !strings.Contains(err.Error(), c.text) || strings.Count(err.Error(), "selfimprove:") != 1 {
			t.Errorf("%s: %q; want it to say %q and name the package once", c.name, err, c.text)
		}
	}
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithNotifier(nil), si.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetRoutes("a", si.Routes{Fallbacks: []string{""}}); !errors.Is(err, si.ErrInvalidOption) || strings.Count(err.Error(), "selfimprove:") != 1 {
		t.Errorf("SetRoutes: %v", err)
	}
}
