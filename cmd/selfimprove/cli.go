package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// Exit codes.
const (
	exitOK       = 0 // success
	exitError    = 1 // the command failed (unreachable, locked, refused)
	exitUsage    = 2 // bad flags or arguments, or input the loop refused as invalid
	exitNotFound = 3 // unknown agent or proposal
	// exitUnreadable: a state file of --dir cannot be read (damaged).
	exitUnreadable = 4
)

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// opts are the flags of every subcommand.
type opts struct {
	url, dir, tokenFile string
	json                bool

	follow       bool
	agents       multi
	types        multi
	statuses     multi
	since        string
	limit        int
	unhealthy    bool
	prefix       string
	reason       string
	author       string
	noVerify     bool
	k            int
	addr         string
	readOnly     bool
	create       bool
	pollInterval time.Duration
	idleTimeout  time.Duration
	maxStreams   int
	allowHosts   multi
	// serve's second and third tokens (serve.go).
	intakeTokenFile, scoreTokenFile string
	intakeAgents, scoreAgents       multi
	intakeNewAgents                 int
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

// env is what a subcommand runs with.
type env struct {
	o      *opts
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// connect opens the client the flags ask for.
	connect func(write bool) (*client, error)
}

type command struct {
	name    string
	args    string // synopsis of the positional arguments
	summary string
	example string
	nargs   [2]int // min and max positional arguments
	flags   func(fs *flag.FlagSet, o *opts)
	run     func(ctx context.Context, e *env, args []string) error
}

var commands []*command

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// commonFlags are accepted by every subcommand, before or after it.
func commonFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.url, "url", "", "URL of a running admin handler (token from SELFIMPROVE_TOKEN or --token-file)")
	fs.StringVar(&o.dir, "dir", "", "state directory to read (default: the library's DefaultDir)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the admin token (default: $SELFIMPROVE_TOKEN)")
	fs.BoolVar(&o.json, "json", false, "print JSON (the schema in docs/cli.md) instead of a table")
}

func newFlagSet(c *command, o *opts) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	commonFlags(fs, o)
	if c.flags != nil {
		c.flags(fs, o)
	}
	return fs
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name, rest, err := splitCommand(args)
	if err != nil {
		fmt.Fprintf(stderr, "selfimprove: %v (see selfimprove -h)\n", err)
		return exitUsage
	}
	if name == "" || name == "help" {
		mainUsage(stdout)
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "selfimprove: unknown command %q (see selfimprove -h)\n", name)
		return exitUsage
	}
	o := &opts{}
	fs := newFlagSet(c, o)
	pos, err := parse(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(stdout, c, fs)
		return exitOK
	}
	if err == nil && (len(pos) < c.nargs[0] || len(pos) > c.nargs[1]) {
		err = usageErr("expects %s", argsText(c))
	}
	if err == nil && slices.Contains(pos, "") {
		err = usageErr("an argument is empty: expects %s", argsText(c))
	}
	if err != nil {
		fmt.Fprintf(stderr, "selfimprove %s: %v (see selfimprove %s -h)\n", c.name, err, c.name)
		return exitUsage
	}
	e := &env{o: o, stdin: stdin, stdout: stdout, stderr: stderr}
	e.connect = func(write bool) (*client, error) { return connect(o, write) }
	err = c.run(ctx, e, pos)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	msg := cell(err.Error())
	if code == exitUsage {
		msg += fmt.Sprintf(" (see selfimprove %s -h)", c.name)
	}
	fmt.Fprintf(stderr, "selfimprove %s: %s\n", c.name, msg)
	return code
}

func exitCode(err error) int {
	var ue *usageError
	var nf *notFoundError
	var ae *apiError
	var ur *unreadableError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ur):
		return exitUnreadable
	case errors.As(err, &nf):
		return exitNotFound
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		return exitNotFound
	case errors.As(err, &ae) && ae.status == http.StatusBadRequest:
		return exitUsage
	}
	return exitError
}

func argsText(c *command) string {
	if c.args == "" {
		return "no arguments"
	}
	return c.args
}

// splitCommand finds the subcommand among args: the first argument that
// is neither a common flag nor a common flag's value. It returns the
// other arguments, in order.
func splitCommand(args []string) (string, []string, error) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	commonFlags(fs, &opts{})
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-h" || a == "-help" || a == "--help" {
			return "", nil, nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest := append(append([]string(nil), args[:i]...), args[i+1:]...)
			return a, rest, nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			return "", nil, usageErr("flag %s before the command is not a common flag (--url, --dir, --token-file, --json)", a)
		}
		if !hasValue && !isBool(f) {
			i++
		}
	}
	if len(args) > 0 {
		return "", nil, usageErr("no command")
	}
	return "", nil, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parse parses the flags of args, wherever they stand, and returns the
// positional arguments. After "--" every argument is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return nil, flag.ErrHelp
		}
		f := fs.Lookup(name)
		if f == nil {
			return nil, usageErr("unknown flag %s", a)
		}
		flags = append(flags, a)
		if !hasValue && !isBool(f) {
			if i+1 == len(args) {
				return nil, usageErr("flag %s needs a value", a)
			}
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageErr("%s", err.Error())
	}
	return pos, nil
}

// connect opens the client the flags ask for: --url, else --dir, else the
// default directory.
func connect(o *opts, write bool) (*client, error) {
	if o.url != "" && o.dir != "" {
		return nil, usageErr("--url and --dir exclude each other")
	}
	if o.url != "" {
		token, err := readToken(o.tokenFile)
		if err != nil {
			return nil, err
		}
		return openURL(o.url, token)
	}
	dir := o.dir
	if dir == "" {
		d, err := selfimprove.DefaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	return openDir(dir, write)
}

// readToken reads the admin token from file, else from SELFIMPROVE_TOKEN.
func readToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv("SELFIMPROVE_TOKEN")), nil
	}
	return readTokenFile(file, "--token-file")
}

// readTokenFile reads a token from file (at most 4 KiB, whitespace around
// it trimmed); flagName names the flag that gave it in errors.
func readTokenFile(file, flagName string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s: %s is larger than 4 KiB: is it the token?", flagName, file)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		// A token not written yet would open the server to anyone.
		return "", usageErr("%s: %s is empty: write the token in it", flagName, file)
	}
	return tok, nil
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `selfimprove: the operator's command for a selfimprove loop.

Usage: selfimprove COMMAND [ARGUMENTS] [FLAGS]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every command reads a state directory (--dir DIR, read-only; default: the
library's default directory) or talks to a running admin handler (--url URL,
with the token in $SELFIMPROVE_TOKEN or --token-file FILE). Flags may stand
before or after the arguments; --json prints JSON.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found (agent or proposal),
4 a state file cannot be read (damaged).
Run 'selfimprove COMMAND -h' for a command's flags and an example.
`)
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: selfimprove %s", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, " [FLAGS]\n\n%s\n\nFlags:\n", c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nExample:\n  %s\n\nExit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 a state file cannot be read.\n", c.example)
}
