package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

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
