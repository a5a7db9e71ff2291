package notify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/notify"
)

// A receiver that answers with a redirect: the sender does not follow it.
// Followed, the secret URL went to the redirect's target in the Referer
// header, a 301, 302 or 303 turned the POST into a GET without the event
// that was counted as delivered, and an https URL could be sent on over
// plain http. The redirect is a failed delivery, not redelivered, and the
// target hears nothing.
func TestSendersDoNotFollowRedirects(t *testing.T) {
	var (
		mu     sync.Mutex
		target []string // what the redirect's target was sent
	)
	third := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		target = append(target, fmt.Sprintf("%s referer=%q body=%d bytes", r.Method, r.Referer(), len(body)))
		mu.Unlock()
	}))
	defer third.Close()
	const secret = "T000/B000/SECRETPATH"
	for _, code := range []int{301, 302, 303, 307, 308} {
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, third.URL+"/elsewhere", code)
		}))
		for _, n := range []si.Notifier{
			notify.Slack{WebhookURL: hook.URL + "/services/" + secret},
			notify.Webhook{URL: hook.URL + "/" + secret, Secret: "k", Client: &http.Client{}},
			notify.Telegram{Token: "1:" + strings.ReplaceAll(secret, "/", ""), ChatID: "1", BaseURL: hook.URL},
		} {
			err := n.Notify(context.Background(), sampleEvent())
			var de *notify.DeliveryError
			if !errors.As(err, &de) || de.Status != code || de.Redeliver() {
				t.Errorf("%d, %T: error %v, want a DeliveryError with status %d, not redelivered", code, n, err, code)
			}
			if err != nil && strings.Contains(err.Error(), "SECRETPATH") {
				t.Errorf("%d, %T: the error shows the URL: %v", code, n, err)
			}
		}
		// Through the loop: counted as failed, not delivered.
		l, emit := looptest.DeliveryLoop(t, notify.Slack{WebhookURL: hook.URL + "/services/" + secret}, si.NotifyOptions{}, nil)
		emit("r1")
		l.Close()
		if m := l.Metrics(); m.Notified != 0 || m.NotifyErrors != 1 {
			t.Errorf("%d: notified %d, failed %d; want 0, 1", code, m.Notified, m.NotifyErrors)
		}
		hook.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(target) > 0 {
		t.Errorf("the redirect's target was sent %d requests, the first %s", len(target), target[0])
	}
}

// A Telegram token read from a file or a secret mount often ends in a
// newline, which no URL can carry. New refuses it, as it refuses a bad
// webhook URL, without quoting the token; before, New took it and every
// delivery failed, each tried 4 times as if the failure were passing.
func TestNewRefusesATelegramTokenNoURLCanCarry(t *testing.T) {
	for _, tok := range []string{"123:AAF-secret\n", " 123:AAF-secret", "123:AAF/secret", "123:AAF?secret", "123:AAF#secret"} {
		n := notify.Telegram{Token: tok, ChatID: "1", BaseURL: "http://127.0.0.1:9"}
		l, err := si.New(si.WithStore(si.NewRAMStore()), si.WithLogger(quiet), si.WithNotifier(n))
		if err == nil {
			l.Close()
			t.Errorf("New accepted the token %q", tok)
			continue
		}
		if !errors.Is(err, si.ErrInvalidOption) || strings.Contains(err.Error(), "secret") {
			t.Errorf("token %q: error %v", tok, err)
		}
	}
	// Used on its own, such a sender's failure is not redelivered.
	err := notify.Telegram{Token: "123:AAF-secret\n", ChatID: "1", BaseURL: "http://127.0.0.1:9"}.Notify(context.Background(), sampleEvent())
	var de *notify.DeliveryError
	if !errors.As(err, &de) || de.Redeliver() || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v: want a DeliveryError that is not redelivered, without the token", err)
	}
}
