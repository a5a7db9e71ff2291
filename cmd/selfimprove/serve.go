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
	if e.o.create && e.o.readOnly {
		return usageErr("--create and --read-only exclude each other")
	}
	if e.o.create {
		if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o700); err != nil {
			return fmt.Errorf("--create: %w", err)
		}
	}
	h, l, err := serveHandler(dir, e.o.readOnly, token, logger)
	if err != nil {
		return err
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
	fmt.Fprintf(e.stderr, "selfimprove: serving %s on http://%s/ (%s)\n", dir, ln.Addr(), serveMode(e.o.readOnly, token))
	err = serveUntil(ctx, srv, ln)
	if cerr := closeLoop(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// serveHandler returns what serve serves over dir. Read-only, it is a
// handler that reads the directory for each request, with reads open and
// mutations refused, and the Loop is nil. Otherwise it is admin.Handler
// over a Loop that holds the directory's lock, with mutations behind token;
// the caller closes the Loop.
func serveHandler(dir string, readOnly bool, token string, logger *slog.Logger) (http.Handler, *selfimprove.Loop, error) {
	if readOnly {
		if _, err := selfimprove.OpenReadOnlyStore(dir); err != nil {
			return nil, nil, fmt.Errorf("state directory %s: %w", dir, err)
		}
		return &readOnlyHandler{dir: dir, opts: admin.Options{Logger: logger}}, nil, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "agents")); err != nil {
		return nil, nil, fmt.Errorf("%s is not a state directory (no agents/): pass --dir DIR, or --create to make one", dir)
	}
	l, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithLogger(logger))
	if errors.Is(err, selfimprove.ErrLocked) {
		return nil, nil, fmt.Errorf("state directory %s is in use by a running Loop: serve its admin API from that process, or pass --read-only", dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return admin.Handler(l, admin.Options{Token: token, Logger: logger}), l, nil
}

// serveMode describes, for the line serve prints, who may do what.
func serveMode(readOnly bool, token string) string {
	switch {
	case readOnly:
		return "read-only"
	case token == "":
		return "no token: reads open, mutations refused (set SELFIMPROVE_TOKEN or --token-file)"
	}
	return "mutations need the token"
}

// serveUntil serves srv on ln until srv fails or ctx is done; then requests
// under way get 2 s, and event streams are cut.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		return err
	}
}
