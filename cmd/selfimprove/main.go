// Command selfimprove is the operator's command for a selfimprove Loop: it
// reads a state directory (--dir, read-only, even while a live Loop holds
// it) or talks to a running admin handler (--url), shows agents, events,
// proposals and the failure memory, approves, rejects and rewinds, serves
// the admin API over a state directory, and serves the loop's failure
// memory to agents over the Model Context Protocol (selfimprove mcp).
//
// Run selfimprove -h, or selfimprove COMMAND -h; see docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
