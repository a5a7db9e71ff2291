package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	if e.o.idleTimeout <= 0 || e.o.maxStreams <= 0 {
		return usageErr("--idle-timeout and --max-streams must be positive")
	}
	lim := defaultLimits
	lim.idle, lim.maxStreams = e.o.idleTimeout, e.o.maxStreams
	opts := admin.Options{Token: token, Logger: logger, AllowedHosts: e.o.allowHosts, MaxStreams: lim.maxStreams,
		HostHint:  "pass its name to selfimprove serve --allow-host",
		TokenHint: "start selfimprove serve with SELFIMPROVE_TOKEN or --token-file"}
	if err := serveTokens(e.o, &opts); err != nil {
		return err
	}
	h, closeH, err := serveHandler(dir, e.o.readOnly, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", e.o.addr)
	if err != nil {
		closeH()
		return fmt.Errorf("--addr: %w", err)
	}
	srv := newHTTPServer(h, lim, logger)
	fmt.Fprintf(e.stderr, "selfimprove: serving %s on http://%s/ (%s%s)\n", dir, ln.Addr(), serveMode(e.o.readOnly, token), tokensMode(&opts))
	err = serveUntil(ctx, srv, ln, closeH)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// limits are serve's bounds on connections.
type limits struct {
	readHeader time.Duration // to read a request's header
	read       time.Duration // to read a whole request, body included
	write      time.Duration // to write an answer (an event stream sets its own deadline at each write)
	idle       time.Duration // a keep-alive connection waits this long for the next request
	maxStreams int           // event streams at once
}

// defaultLimits are serve's defaults (--idle-timeout, --max-streams).
var defaultLimits = limits{readHeader: 10 * time.Second, read: 30 * time.Second, write: 30 * time.Second,
	idle: 60 * time.Second, maxStreams: 100}

// newHTTPServer returns the server of h with lim's timeouts.
func newHTTPServer(h http.Handler, lim limits, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// serveHandler returns what serve serves over dir, and what closes it.
// Read-only, it is a readOnlyHandler: a Loop on the directory for each
// request, reads behind opts.Token when there is one, mutations refused.
// Otherwise it is admin.Handler over a Loop that holds the directory's
// lock, with every request behind opts.Token (reads are open, and
// mutations refused, without one).
func serveHandler(dir string, readOnly bool, opts admin.Options) (http.Handler, func() error, error) {
	if err := checkStateDir(dir, "pass --dir DIR, or --create to make one"); err != nil {
		return nil, nil, err
	}
	if readOnly {
		h, err := newReadOnlyHandler(dir, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("state directory %s: %w", dir, err)
		}
		return h, h.Close, nil
	}
	l, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithNotifier(nil), selfimprove.WithLogger(opts.Logger))
	if errors.Is(err, selfimprove.ErrLocked) {
		return nil, nil, fmt.Errorf("state directory %s is in use by a running Loop: serve its admin API from that process, or pass --read-only", dir)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, nil, fmt.Errorf("open %s: %w: serve needs write access to the directory, or pass --read-only to serve it without writing (mutations refused)", dir, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return admin.Handler(l, opts), l.Close, nil
}

// serveMode describes, for the line serve prints, who may do what.
func serveMode(readOnly bool, token string) string {
	switch {
	case readOnly && token == "":
		return "read-only, no token: reads open to anyone who can reach the address, mutations refused"
	case readOnly:
		return "read-only: reads need the token, mutations refused"
	case token == "":
		return "no token: reads open to anyone who can reach the address, mutations refused (set SELFIMPROVE_TOKEN or --token-file)"
	}
	return "reads and mutations need the token"
}

// serveUntil serves srv on ln until srv fails or ctx is done, and closes
// what closeH closes (the Loop). When ctx is done, srv takes no new
// connection, the requests under way (event streams aside) get 2 s, and
// then the Loop is closed, which sends each event stream an event
// "closed" and ends it; the connections still open after the 2 s are cut.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener, closeH func() error) error {
	gate := &requestGate{h: srv.Handler}
	srv.Handler = gate
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		if cerr := closeH(); cerr != nil && err == nil {
			err = cerr
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	// Shutdown runs this once it has closed the listener; it then waits
	// for the streams, which the Loop's end ends.
	srv.RegisterOnShutdown(func() {
		gate.wait(sctx)
		closed <- closeH()
	})
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if cerr := <-closed; cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// requestGate serves h, and counts the requests under way that are not
// event streams: serve lets them finish before it closes the Loop.
type requestGate struct {
	h    http.Handler
	mu   sync.Mutex
	n    int           // requests under way, event streams aside
	idle chan struct{} // while wait waits: closed when n drops to 0
}

func (g *requestGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/events/stream" {
		g.h.ServeHTTP(w, r)
		return
	}
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if g.n--; g.n == 0 && g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}()
	g.h.ServeHTTP(w, r)
}

// wait waits until no request is under way (event streams aside), or ctx
// is done.
func (g *requestGate) wait(ctx context.Context) {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// serveTokenFlags are serve's flags of the intake's and the judge's
// tokens.
func serveTokenFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.intakeTokenFile, "intake-token-file", "", "file holding the intake token: reports outcomes and reads configs of the --intake-agent agents, nothing else (default: $SELFIMPROVE_INTAKE_TOKEN)")
	fs.Var(&o.intakeAgents, "intake-agent", "an agent the intake token may report for: an ID, or a prefix ending in * (repeatable; required with an intake token)")
	fs.IntVar(&o.intakeNewAgents, "intake-new-agents", 60, "agents each token may create through the intake a minute")
	fs.StringVar(&o.scoreTokenFile, "score-token-file", "", "file holding the score token: posts scores of the --score-agent agents, nothing else (default: $SELFIMPROVE_SCORE_TOKEN)")
	fs.Var(&o.scoreAgents, "score-agent", "an agent the score token may score: an ID, or a prefix ending in * (repeatable; required with a score token)")
}

// serveTokens reads the intake's and the judge's tokens into opts, and
// checks that each comes with its agents and differs from the others.
func serveTokens(o *opts, opts *admin.Options) error {
	var err error
	if opts.IntakeToken, err = readSecret(o.intakeTokenFile, "SELFIMPROVE_INTAKE_TOKEN", "--intake-token-file"); err != nil {
		return err
	}
	if opts.ScoreToken, err = readSecret(o.scoreTokenFile, "SELFIMPROVE_SCORE_TOKEN", "--score-token-file"); err != nil {
		return err
	}
	if o.intakeNewAgents <= 0 {
		return usageErr("--intake-new-agents must be positive")
	}
	opts.IntakeAgents, opts.ScoreAgents, opts.IntakeNewAgents = o.intakeAgents, o.scoreAgents, o.intakeNewAgents
	for _, c := range []struct {
		tok, env, flag, a string
		agents            []string
	}{{opts.IntakeToken, "SELFIMPROVE_INTAKE_TOKEN", "intake", "an", o.intakeAgents}, {opts.ScoreToken, "SELFIMPROVE_SCORE_TOKEN", "score", "a", o.scoreAgents}} {
		switch {
		case c.tok != "" && len(c.agents) == 0:
			return usageErr("the %s token needs --%s-agent: the agents it may act for (IDs, or prefixes ending in *)", c.flag, c.flag)
		case c.tok == "" && len(c.agents) > 0:
			return usageErr("--%s-agent needs %s %s token ($%s or --%s-token-file)", c.flag, c.a, c.flag, c.env, c.flag)
		case c.tok != "" && o.readOnly:
			return usageErr("--read-only serves no %s token: it refuses every mutation", c.flag)
		case c.tok != "" && c.tok == opts.Token:
			return usageErr("the %s token is the admin token: give it a token of its own", c.flag)
		}
	}
	if opts.IntakeToken != "" && opts.IntakeToken == opts.ScoreToken {
		return usageErr("the intake and score tokens are the same: give each a token of its own")
	}
	return nil
}

// readSecret reads a token from file, else from the environment variable
// env; flagName names the file's flag in errors.
func readSecret(file, env, flagName string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(env)), nil
	}
	return readTokenFile(file, flagName)
}

// tokensMode describes, for the line serve prints, the intake's and the
// judge's tokens.
func tokensMode(o *admin.Options) string {
	var b strings.Builder
	if o.IntakeToken != "" {
		fmt.Fprintf(&b, "; the intake token reports for %s", strings.Join(o.IntakeAgents, ", "))
	}
	if o.ScoreToken != "" {
		fmt.Fprintf(&b, "; the score token scores %s", strings.Join(o.ScoreAgents, ", "))
	}
	return b.String()
}
