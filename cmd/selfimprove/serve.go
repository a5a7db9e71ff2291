package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// runServe serves admin.Handler and its dashboard over a state directory,
// until interrupted. It takes the directory's lock, unless --read-only.
func runServe(ctx context.Context, e *env, _ []string) error {
	if e.o.url != "" {
		return usageErr("serve serves a state directory: use --dir")
	}
	token, err := readToken(e.o.tokenFile)
	if err != nil {
		return err
	}
	dir := e.o.dir
	if dir == "" {
		if dir, err = selfimprove.DefaultDir(); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var h http.Handler
	var l *selfimprove.Loop
	if e.o.readOnly {
		if _, err := selfimprove.OpenReadOnlyStore(dir); err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
		// Reads open, mutations refused; each request reads the directory.
		token = ""
		h = &readOnlyHandler{dir: dir, opts: admin.Options{Logger: logger}}
	} else {
		if _, err := os.Stat(filepath.Join(dir, "agents")); err != nil {
			return fmt.Errorf("%s is not a state directory (no agents/): pass --dir DIR", dir)
		}
		l, err = selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithLogger(logger))
		if errors.Is(err, selfimprove.ErrLocked) {
			return fmt.Errorf("state directory %s is in use by a running Loop: serve its admin API from that process, or pass --read-only", dir)
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", dir, err)
		}
		h = admin.Handler(l, admin.Options{Token: token, Logger: logger})
	}
	closeLoop := func() error {
		if l == nil {
			return nil
		}
		return l.Close()
	}
	ln, err := net.Listen("tcp", e.o.addr)
	if err != nil {
		closeLoop()
		return fmt.Errorf("--addr: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	mode := "mutations need the token"
	switch {
	case e.o.readOnly:
		mode = "read-only"
	case token == "":
		mode = "no token: reads open, mutations refused (set SELFIMPROVE_TOKEN or --token-file)"
	}
	fmt.Fprintf(e.stderr, "selfimprove: serving %s on http://%s/ (%s)\n", dir, ln.Addr(), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Requests under way get 2 s; event streams are then cut.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err = srv.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		cancel()
	}
	if cerr := closeLoop(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
