package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/notify"
)

// sampleEvent is a rollback with everything a message shows.
func sampleEvent() si.Event {
	ch := &si.Change{
		ID: "c1", AgentID: "search <bot> & co",
		From:   si.Config{Version: 1, Timeout: time.Second, Route: "primary"},
		To:     si.Config{Version: 2, Timeout: 1500 * time.Millisecond, Route: "primary"},
		Reason: "timeouts: raise the timeout from 1s to 1.5s",
		Before: si.Stats{Calls: 20, Failures: 8, SuccessRate: 0.6, AvgLatency: 900 * time.Millisecond},
		After:  si.Stats{Calls: 10, Failures: 5, SuccessRate: 0.5, AvgLatency: 1200 * time.Millisecond},
		State:  si.ChangeRolledBack, Verdict: "the last 5 calls under v2 failed in a row, against 8 in 20 before; 5 consecutive failures (limit 5)",
	}
	return si.Event{ID: "e1", Time: t0, Type: si.EventRolledBack, AgentID: ch.AgentID, Change: ch,
		Message: "agent \"search <bot> & co\": rolled back config v2 to v1"}
}

// recordedRequest is what a test server saw.
type recordedRequest struct {
	Method, Path, ContentType string
	Header                    http.Header
	Body                      []byte
	At                        time.Time
}

// fakeService records requests and answers with the statuses in order
// (200 once they run out).
type fakeService struct {
	mu       sync.Mutex
	reqs     []recordedRequest
	statuses []int
	headers  []map[string]string
	bodies   []string
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	i := len(f.reqs)
	f.reqs = append(f.reqs, recordedRequest{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Clone(), body, time.Now()})
	status, hdr, rbody := 200, map[string]string(nil), `{"ok":true}`
	if i < len(f.statuses) {
		status = f.statuses[i]
		if i < len(f.headers) {
			hdr = f.headers[i]
		}
		if i < len(f.bodies) {
			rbody = f.bodies[i]
		}
	}
	f.mu.Unlock()
	for k, v := range hdr {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	io.WriteString(w, rbody)
}

func (f *fakeService) requests() []recordedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recordedRequest(nil), f.reqs...)
}

// inProcess is an http.Client that serves requests with h in-process, as
// if from http://127.0.0.1: no sockets, so that it runs inside a synctest
// bubble.
func inProcess(h http.Handler) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestSlackRequest(t *testing.T) {
	f := &fakeService{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := notify.Slack{WebhookURL: srv.URL + "/services/T000/B000/XXXX"}
	if err := n.Notify(context.Background(), sampleEvent()); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != "/services/T000/B000/XXXX" || reqs[0].ContentType != "application/json" {
		t.Fatalf("requests %+v", reqs)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Fields []struct{ Type, Text string } `json:"fields"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(reqs[0].Body, &msg); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg.Text, "Rolled back: ") || !strings.Contains(msg.Text, "search &lt;bot&gt; &amp; co") {
		t.Errorf("text %q", msg.Text)
	}
	if len(msg.Blocks) < 3 || msg.Blocks[0].Type != "header" || msg.Blocks[0].Text.Text != "Rolled back" {
		t.Fatalf("blocks %+v", msg.Blocks)
	}
	var fields []string
	for _, b := range msg.Blocks[2:] {
		for _, f := range b.Fields {
			if f.Type != "mrkdwn" {
				t.Errorf("field type %q", f.Type)
			}
			fields = append(fields, f.Text)
		}
	}
	all := strings.Join(fields, "\n")
	for _, want := range []string{
		"*Agent*\nsearch &lt;bot&gt; &amp; co",
		"*Change*\nv1 → v2",
		"*From*\nv1, timeout 1s, 1 attempt(s), route primary",
		"*To*\nv2, timeout 1.5s, 1 attempt(s), route primary",
		"*Reason*\ntimeouts: raise the timeout from 1s to 1.5s",
		"*Before*\n60.0% success over 20 calls, average latency 900ms",
		"*After*\n50.0% success over 10 calls, average latency 1.2s",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("fields lack %q:\n%s", want, all)
		}
	}
}

// A verdict's plain sentence ends the summary; its statistics are in the
// Verdict field (issue 43, item 6). Before, the summary carried the whole
// verdict, statistics and all.
func TestSummaryEndsWithThePlainSentence(t *testing.T) {
	f := &fakeService{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	e := sampleEvent()
	e.Message = "agent \"search\": rolled back config v2 to v1: " + e.Change.Verdict
	if err := (notify.Slack{WebhookURL: srv.URL + "/hook"}).Notify(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	var msg struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(reqs[0].Body, &msg); err != nil {
		t.Fatal(err)
	}
	want := "Rolled back: agent \"search\": rolled back config v2 to v1: the last 5 calls under v2 failed in a row, against 8 in 20 before"
	if msg.Text != want {
		t.Errorf("text %q, want %q", msg.Text, want)
	}
	if body := string(reqs[0].Body); !strings.Contains(body, "*Verdict*\\n"+e.Change.Verdict) {
		t.Errorf("no Verdict field with the whole verdict in %s", body)
	}
}

func TestTelegramRequest(t *testing.T) {
	f := &fakeService{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	const token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"
	n := notify.Telegram{Token: token, ChatID: "-1001234", BaseURL: srv.URL + "/"}
	if err := n.Notify(context.Background(), sampleEvent()); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != "/bot"+token+"/sendMessage" || reqs[0].ContentType != "application/json" {
		t.Fatalf("requests %+v", reqs)
	}
	var msg map[string]any
	if err := json.Unmarshal(reqs[0].Body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg["chat_id"] != "-1001234" || msg["parse_mode"] != "HTML" {
		t.Errorf("message %v", msg)
	}
	text, _ := msg["text"].(string)
	for _, want := range []string{"<b>Rolled back</b>", "<b>Agent:</b> search &lt;bot&gt; &amp; co", "<b>Change:</b> v1 → v2", "<b>Before:</b> 60.0% success"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "<bot>") {
		t.Errorf("unescaped text:\n%s", text)
	}
}

// The webhook's signature, checked by an independent implementation: the
// receiver's side as the doc comment describes it.
func TestWebhookSignature(t *testing.T) {
	f := &fakeService{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := notify.Webhook{URL: srv.URL + "/hook/s3cret-path", Secret: "k3y"}
	ev := sampleEvent()
	if err := n.Notify(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	ts, sig := r.Header.Get("X-Selfimprove-Timestamp"), r.Header.Get("X-Selfimprove-Signature")
	mac := hmac.New(sha256.New, []byte("k3y"))
	fmt.Fprintf(mac, "%s.%s", ts, r.Body)
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(sig), []byte(want)) {
		t.Fatalf("signature %q, want %q", sig, want)
	}
	var got si.Event
	if err := json.Unmarshal(r.Body, &got); err != nil || got.ID != ev.ID || got.Change.To.Version != 2 {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	// Without a secret there is no signature.
	if err := (notify.Webhook{URL: srv.URL}).Notify(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if h := f.requests()[1].Header.Get("X-Selfimprove-Signature"); h != "" {
		t.Errorf("unsigned request has a signature %q", h)
	}
}

func TestSendersRefusePlainHTTP(t *testing.T) {
	for _, n := range []si.Notifier{
		notify.Slack{WebhookURL: "http://hooks.slack.example/services/x"},
		notify.Telegram{Token: "t", ChatID: "1", BaseURL: "http://api.telegram.example"},
		notify.Webhook{URL: "http://10.0.0.1/hook"},
	} {
		if err := n.Notify(context.Background(), sampleEvent()); !errors.Is(err, notify.ErrInsecureURL) {
			t.Errorf("%T: %v", n, err)
		}
	}
}

// Retries, with the exact waits between attempts (fake time): a 429's
// Retry-After, Telegram's retry_after, exponential backoff on 5xx, and no
// retry on another 4xx.
func TestRetries(t *testing.T) {
	cases := []struct {
		name              string
		svc               *fakeService
		notifier          func(c *http.Client) si.Notifier
		waits             []time.Duration // between the requests
		notified, errored int64
	}{
		{"429 with Retry-After", &fakeService{statuses: []int{429}, headers: []map[string]string{{"Retry-After": "7"}}},
			func(c *http.Client) si.Notifier { return notify.Slack{WebhookURL: "http://127.0.0.1/x", Client: c} },
			[]time.Duration{7 * time.Second}, 1, 0},
		{"Telegram retry_after in the body", &fakeService{statuses: []int{429}, bodies: []string{`{"ok":false,"error_code":429,"parameters":{"retry_after":3}}`}},
			func(c *http.Client) si.Notifier {
				return notify.Telegram{Token: "1:x", ChatID: "1", BaseURL: "http://127.0.0.1", Client: c}
			},
			[]time.Duration{3 * time.Second}, 1, 0},
		{"500 and 503, then success", &fakeService{statuses: []int{500, 503}},
			func(c *http.Client) si.Notifier { return notify.Webhook{URL: "http://127.0.0.1/h", Client: c} },
			[]time.Duration{time.Second, 2 * time.Second}, 1, 0},
		{"400 is not retried", &fakeService{statuses: []int{400}},
			func(c *http.Client) si.Notifier { return notify.Slack{WebhookURL: "http://127.0.0.1/x", Client: c} },
			nil, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, emit := looptest.DeliveryLoop(t, c.notifier(inProcess(c.svc)), si.NotifyOptions{}, nil)
				emit("r1")
				time.Sleep(time.Minute)
				l.Close()
				reqs := c.svc.requests()
				var waits []time.Duration
				for i := 1; i < len(reqs); i++ {
					waits = append(waits, reqs[i].At.Sub(reqs[i-1].At))
				}
				if fmt.Sprint(waits) != fmt.Sprint(c.waits) {
					t.Errorf("waits between %d requests %v, want %v", len(reqs), waits, c.waits)
				}
				if m := l.Metrics(); m.Notified != c.notified || m.NotifyErrors != c.errored {
					t.Errorf("notified %d, errors %d; want %d, %d", m.Notified, m.NotifyErrors, c.notified, c.errored)
				}
			})
		})
	}
}

// Each sender given to WithNotifier is retried on its own: the one that
// succeeded is not sent the event again.
func TestSendersRetryEachOnTheirOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok, flaky := &fakeService{}, &fakeService{statuses: []int{502}}
		l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(
			notify.Webhook{URL: "http://127.0.0.1/ok", Client: inProcess(ok)},
			notify.Webhook{URL: "http://127.0.0.1/flaky", Client: inProcess(flaky)},
		))
		if err := l.SetConfig("a", si.Config{Route: "r1"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		l.Close()
		if a, b := len(ok.requests()), len(flaky.requests()); a != 1 || b != 2 {
			t.Fatalf("requests: %d to the healthy one (want 1), %d to the flaky one (want 2)", a, b)
		}
	})
}

// A receiver that refuses connections: the delivery is retried, then
// counted and logged, and neither the error nor the log holds the token.
func TestConnectionRefusedAndRedaction(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const token = "987654321:AAF-secret-token-value-xyz"
	n := notify.Telegram{Token: token, ChatID: "1", BaseURL: "http://" + addr}
	err = n.Notify(context.Background(), sampleEvent())
	var de *notify.DeliveryError
	if !errors.As(err, &de) || de.Status != 0 || !de.Redeliver() {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "sendMessage") {
		t.Fatalf("the error leaks the URL: %v", err)
	}
	// Through the loop: retried, then counted and logged, redacted.
	logs := &looptest.Buffer{}
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(n),
		si.WithNotifyOptions(si.NotifyOptions{Attempts: 3, Backoff: time.Millisecond}),
		si.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err := l.SetConfig("a", si.Config{Route: "x"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if m := l.Metrics(); m.NotifyErrors != 1 || m.Notified != 0 {
		t.Errorf("metrics %+v", m)
	}
	out := logs.String()
	if !strings.Contains(out, "notifier failed") || !strings.Contains(out, "attempts=") {
		t.Errorf("no failure logged:\n%s", out)
	}
	if strings.Contains(out, token) || strings.Contains(out, "AAF-secret") {
		t.Errorf("the log leaks the token:\n%s", out)
	}
	// A 500's error holds no secret either.
	srv := httptest.NewServer(&fakeService{statuses: []int{500}})
	defer srv.Close()
	err = notify.Webhook{URL: srv.URL + "/hooks/very-secret-path"}.Notify(context.Background(), sampleEvent())
	if !errors.As(err, &de) || strings.Contains(err.Error(), "very-secret-path") || !de.Redeliver() {
		t.Errorf("error %v", err)
	}
}

// A receiver that hangs holds only the delivery goroutine: calls that make
// decisions go on returning, and the notifier's queue absorbs or drops.
func TestHungReceiverNeverSlowsCalls(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
	}))
	defer srv.Close()
	l := looptest.NewLoop(t, si.WithStrategy(nil), si.WithNotifier(notify.Webhook{URL: srv.URL}),
		si.WithNotifyOptions(si.NotifyOptions{Queue: 4, Timeout: time.Hour}))
	if err := l.SetConfig("a", si.Config{Route: "first"}); err != nil {
		t.Fatal(err)
	}
	<-arrived // the receiver holds the first event's request and never answers
	done := make(chan int)
	go func() { done <- e2eCalls(t, l, 50) }()
	select {
	case n := <-done:
		if n != 50 {
			t.Fatalf("%d of 50 calls returned", n)
		}
	case <-time.After(time.Minute): // a guard against a deadlock, not a timing
		t.Fatal("calls blocked behind a hung receiver")
	}
	// Of the 50 new events, 4 wait in the queue and 46 were dropped and
	// counted.
	if m := l.Metrics(); m.NotifyDropped != 46 {
		t.Errorf("dropped %d, want 46", m.NotifyDropped)
	}
	close(release)
	l.Close()
}

// e2eCalls makes n calls that each decide something (an operator action
// and a call), and returns how many returned.
func e2eCalls(t *testing.T, l *si.Loop, n int) int {
	done := 0
	for i := range n {
		if err := l.SetConfig("a", si.Config{Route: fmt.Sprint(i)}); err != nil {
			t.Error(err) // not Fatal: this may run on another goroutine
			return done
		}
		l.ExecuteWithImprovement(context.Background(), "a", func(context.Context, si.Config) error { return nil })
		done++
	}
	return done
}

// New validates the senders: https only (http on loopback), a parsable
// URL, a Telegram token and chat; the error wraps ErrInvalidOption, names
// the option and quotes no secret.
func TestNewValidatesSenders(t *testing.T) {
	tests := []struct {
		n        []si.Notifier
		insecure bool
	}{
		{[]si.Notifier{notify.Slack{WebhookURL: "http://hooks.example.com/T000/B000/secret"}}, true},
		{[]si.Notifier{notify.Log{}, notify.Webhook{URL: "not a url"}}, false},
		{[]si.Notifier{&notify.Telegram{Token: "123:abc"}}, false},
		{[]si.Notifier{notify.Telegram{Token: "123:abc", ChatID: "1", BaseURL: "http://api.telegram.example/secret"}}, true},
	}
	for _, tt := range tests {
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithNotifier(tt.n...))
		if err == nil {
			l.Close()
			t.Fatalf("New accepted %+v", tt.n)
		}
		if !errors.Is(err, si.ErrInvalidOption) || !strings.Contains(err.Error(), "WithNotifier") {
			t.Fatalf("error %q does not wrap ErrInvalidOption naming WithNotifier", err)
		}
		if errors.Is(err, notify.ErrInsecureURL) != tt.insecure {
			t.Errorf("error %q: ErrInsecureURL %v, want %v", err, !tt.insecure, tt.insecure)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "123:abc") {
			t.Fatalf("the error shows a secret: %v", err)
		}
	}
	l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet),
		si.WithNotifier(notify.Slack{WebhookURL: "http://127.0.0.1:9/hook"}, &notify.Webhook{URL: "https://hooks.example.com/x"},
			notify.Telegram{Token: "1:x", ChatID: "1", BaseURL: "http://localhost:8081"}, notify.Log{}))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// Log logs as the loop's default notifier does: the message, then the
// event's attributes; a rollback at level Warn.
func TestLog(t *testing.T) {
	logs := &looptest.Buffer{}
	n := notify.Log{Logger: slog.New(slog.NewTextHandler(logs, nil))}
	if err := n.Notify(context.Background(), sampleEvent()); err != nil {
		t.Fatal(err)
	}
	p := &si.Proposal{ID: "p1", Class: failure.ClassAuth, Status: si.ProposalPending}
	if err := n.Notify(context.Background(), si.Event{ID: "e2", Type: si.EventProposalFiled, AgentID: "b", Proposal: p, Message: "filed"}); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="selfimprove: agent \"search <bot> & co\": rolled back config v2 to v1" event=rolled_back agent="search <bot> & co" id=e1 from_version=1 to_version=2` + "\n",
		`level=WARN msg="selfimprove: filed" event=proposal_filed agent=b id=e2 proposal=p1 class=auth status=pending` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
