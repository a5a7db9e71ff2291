package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// UnreadableFile is an agent's state file that cannot be read (cut
// short, not JSON, over its bound, not a regular file), in the JSON of
// status and agents with --dir: its agent's ID cannot be known.
type UnreadableFile struct {
	// File is the file's path, relative to the state directory
	// (agents/NAME.json).
	File string `json:"file"`
	// Error says why.
	Error string `json:"error"`
}

// unreadableError is a state file the command could not read (exit
// code 4).
type unreadableError struct{ msg string }

func (e *unreadableError) Error() string { return e.msg }

// whyText is a store's error without the library's prefix.
func whyText(err error) string {
	return strings.TrimPrefix(err.Error(), "selfimprove: ")
}

// unreadableAgent is the error of agent NAME for an agent unknown to
// the loop (a 404): with --dir, the agent's state file may be there but
// damaged (a Loop shows no agent for it). It returns nil when the file
// is missing or can be read.
func unreadableAgent(c *client, id string) error {
	if c.ro == nil {
		return nil
	}
	err := c.ro.store.CheckAgent(id)
	var u *selfimprove.UnreadableFile
	if err == nil || !errors.As(err, &u) || !errors.Is(err, selfimprove.ErrCorruptState) {
		return nil
	}
	return &unreadableError{fmt.Sprintf("agent %q: its state file %s cannot be read (%s): %s",
		id, u.Path, whyText(u.Err), restoreAdvice)}
}

// unreadableLog begins the loop's log lines about an agent's state file
// that cannot be read (the ReadOnlyStore's "not listed", the Loop's
// "left as it is").
const unreadableLog = "selfimprove: an agent's state file cannot be read"

// reportedHandler passes the loop's log lines on to Handler, but for
// those about an agent's state file that cannot be read once the
// command reports such files itself (reportUnreadable): the user reads
// one message about the file, not also a log line saying it is "not
// listed" above a table that lists it.
type reportedHandler struct {
	slog.Handler
	on *atomic.Bool // the command reports them
}

// Handle implements slog.Handler.
func (h *reportedHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.on.Load() && strings.HasPrefix(r.Message, unreadableLog) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *reportedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &reportedHandler{Handler: h.Handler.WithAttrs(attrs), on: h.on}
}

// WithGroup implements slog.Handler.
func (h *reportedHandler) WithGroup(name string) slog.Handler {
	return &reportedHandler{Handler: h.Handler.WithGroup(name), on: h.on}
}

// reportUnreadable says that the command reports the agents' state files
// that cannot be read itself (a row of the agents' table, its error line,
// exit code 4), so that the loop's log lines about them are not shown.
func (c *client) reportUnreadable() {
	if c.reported != nil {
		c.reported.Store(true)
	}
}

// restoreAdvice says what to do about a damaged state file.
const restoreAdvice = "restore it from a backup; else the Loop that owns the directory sets it aside when it loads the agent, which then begins again from the default config"

// unreadableFiles returns, with --dir, the agents' state files that cannot
// be read, which the loop does not list.
func unreadableFiles(c *client) ([]UnreadableFile, error) {
	if c.ro == nil {
		return nil, nil
	}
	bad, err := c.ro.store.UnreadableAgentFiles()
	if err != nil {
		return nil, fmt.Errorf("list the agents' state files: %w", err)
	}
	var out []UnreadableFile
	for _, u := range bad {
		rel, err := filepath.Rel(c.dir, u.Path)
		if err != nil {
			rel = u.Path
		}
		out = append(out, UnreadableFile{File: rel, Error: whyText(u.Err)})
	}
	return out, nil
}

// unreadableErr is the command's error for bad, after its output: nil
// when bad is empty.
func unreadableErr(c *client, bad []UnreadableFile) error {
	if len(bad) == 0 {
		return nil
	}
	first := fmt.Sprintf("%s (%s)", filepath.Join(c.dir, bad[0].File), bad[0].Error)
	if len(bad) == 1 {
		return &unreadableError{fmt.Sprintf("an agent's state file cannot be read: %s: %s", first, restoreAdvice)}
	}
	return &unreadableError{fmt.Sprintf("%d agents' state files cannot be read: %s and %d more (listed as unreadable): %s",
		len(bad), first, len(bad)-1, restoreAdvice)}
}

// unreadableRows prints a row of the agents' table for each file of bad.
func unreadableRows(w io.Writer, bad []UnreadableFile) {
	for _, u := range bad {
		fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", cell(u.File), cell("unreadable: "+u.Error), "the agent's state file cannot be read: restore it")
	}
}

// AgentsView is the JSON of selfimprove agents: the admin API's
// AgentList, with, from --dir, the agents' state files that cannot be
// read (absent when there are none).
type AgentsView struct {
	admin.AgentList
	Unreadable []UnreadableFile `json:"unreadable,omitempty"`
}
