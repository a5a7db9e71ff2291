// Command admin serves a Loop's operator surface (JSON API, live events,
// /metrics) on the loopback interface, with a little traffic so that
// there is something to see, and prints its URL:
//
//	go run ./examples/admin                 # serves until Ctrl-C
//	go run ./examples/admin -for 2s         # serves for 2 seconds
//	SELFIMPROVE_TOKEN=secret go run ./examples/admin   # mutations need the token
//
// Then, with URL the address it prints:
//
//	curl $URL/api/agents
//	curl -N $URL/api/events/stream
//	curl $URL/metrics
//
// and the dashboard at $URL/ in a browser.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func main() {
	serveFor := flag.Duration("for", 0, "stop after this long (0: serve until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *serveFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *serveFor)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, os.Getenv("SELFIMPROVE_TOKEN")); err != nil {
		log.Fatal(err)
	}
}

// run makes the traffic, prints "URL=..." and serves until ctx ends.
func run(ctx context.Context, w io.Writer, token string) error {
	dir, err := os.MkdirTemp("", "selfimprove-admin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	loop, err := selfimprove.New(selfimprove.WithDir(dir), selfimprove.WithLogger(logger), selfimprove.WithNotifier(nil),
		// The demo's failing calls return at once: by default a 503 is
		// tried 3 times, with backoff, which made the demo wait 20 s.
		selfimprove.WithRetryPolicy(selfimprove.RetryPolicy{TransientAttempts: 1}))
	if err != nil {
		return err
	}
	defer loop.Close()
	traffic(loop)

	mux := http.NewServeMux()
	mux.Handle("/selfimprove/", http.StripPrefix("/selfimprove", admin.Handler(loop, admin.Options{Token: token})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	// No trailing slash: $URL/api/agents is then /selfimprove/api/agents.
	fmt.Fprintf(w, "URL=http://%s/selfimprove\n", ln.Addr())
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// traffic makes a few calls: a steady agent, and a flaky one whose
// failures cross its threshold.
func traffic(loop *selfimprove.Loop) {
	ctx := context.Background()
	loop.SetThreshold("orders", selfimprove.Threshold{Failures: 3, Window: time.Hour, Cooldown: time.Minute})
	for i := range 40 {
		loop.ExecuteWithImprovement(ctx, "search", func(context.Context, selfimprove.Config) error { return nil })
		loop.ExecuteWithImprovement(ctx, "orders", func(context.Context, selfimprove.Config) error {
			if i >= 30 {
				return errors.New("upstream: 503 service unavailable")
			}
			return nil
		})
	}
}
