// Package notify sends a Loop's events to people and systems: Slack,
// Telegram, a signed webhook, or a slog.Logger. Give the senders to
// selfimprove.WithNotifier; each gets every event, with its own retries:
//
//	loop, err := selfimprove.New(selfimprove.WithNotifier(
//		notify.Slack{WebhookURL: os.Getenv("SLACK_WEBHOOK_URL")},
//		notify.Webhook{URL: "https://ops.example.com/hooks/selfimprove", Secret: os.Getenv("HOOK_SECRET")},
//	))
//
// A sender's Notify makes one synchronous request, and follows no redirect
// (a 3xx is a failed delivery, not redelivered) unless its Client has a
// CheckRedirect of its own. Retries, digests of
// bursts and the queue are the Loop's (see selfimprove.NotifyOptions): a
// failed request returns a *DeliveryError, whose Redeliver method tells
// the Loop whether to try again. Each sender's Validate, which New calls,
// checks its address: https, or plain http to a loopback address
// (ErrInsecureURL). URLs, tokens and secrets never appear in an error.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// ErrInsecureURL: a sender's URL is not https. Plain http is accepted for
// loopback addresses only (localhost, 127.0.0.0/8, ::1), for tests.
var ErrInsecureURL = errors.New("notify: URL must be https (http only on loopback)")

// DeliveryError is the error of a sender whose request failed. Its text
// never holds the URL, a token or a secret: only the sender's name, the
// HTTP status and the transport error (with the host, not the path).
type DeliveryError struct {
	// Notifier names the sender: "slack", "telegram" or "webhook".
	Notifier string
	// Status is the HTTP status, 0 when no response came.
	Status int
	// Wait is the wait the receiver asked for (Retry-After, or Telegram's
	// retry_after), 0 for none.
	Wait time.Duration
	// Err is the transport error, if any, without the request URL.
	Err error
}

// Error describes the failure: the sender, and the transport error or the
// status (with the wait asked for).
func (e *DeliveryError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("notify: %s: %v", e.Notifier, e.Err)
	case e.Wait > 0:
		return fmt.Sprintf("notify: %s: HTTP %d (retry after %v)", e.Notifier, e.Status, e.Wait)
	case e.Status >= 300 && e.Status < 400:
		return fmt.Sprintf("notify: %s: HTTP %d (a redirect, not followed)", e.Notifier, e.Status)
	}
	return fmt.Sprintf("notify: %s: HTTP %d", e.Notifier, e.Status)
}

// Unwrap returns the transport error.
func (e *DeliveryError) Unwrap() error { return e.Err }

// Redeliver reports whether another delivery attempt may succeed: true on
// a transport error (Status 0), 429 and 5xx; false on other statuses, and
// on an address no request can be made to (an invalid URL).
// The Loop redelivers an event when it is true (see selfimprove.Notifier).
func (e *DeliveryError) Redeliver() bool {
	if errors.Is(e.Err, errInvalidURL) {
		return false
	}
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// errInvalidURL is the Err of a DeliveryError for an address no request
// can be made to. It never quotes the address.
var errInvalidURL = errors.New("invalid URL")

// RetryAfter returns Wait, the wait the receiver asked for; the Loop
// waits that long (up to NotifyOptions.MaxBackoff) before the next
// attempt.
func (e *DeliveryError) RetryAfter() time.Duration { return e.Wait }

// post sends body to rawURL as JSON and maps the outcome. name names the
// sender in errors.
func post(ctx context.Context, client *http.Client, name, rawURL string, body []byte, header http.Header) error {
	if err := checkURL(name, rawURL); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return &DeliveryError{Notifier: name, Err: errInvalidURL}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirects(client).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds the secret; the cause does not
		}
		return &DeliveryError{Notifier: name, Err: err}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	wait, _ := failure.HeaderWait(resp.Header, resp.StatusCode, time.Now())
	de := &DeliveryError{Notifier: name, Status: resp.StatusCode, Wait: wait}
	if de.Wait == 0 && resp.StatusCode == http.StatusTooManyRequests {
		// Telegram says it in the body: {"parameters":{"retry_after":N}}.
		var tg struct {
			Parameters struct {
				RetryAfter int `json:"retry_after"`
			} `json:"parameters"`
		}
		if json.Unmarshal(data, &tg) == nil && tg.Parameters.RetryAfter > 0 {
			de.Wait = time.Duration(tg.Parameters.RetryAfter) * time.Second
		}
	}
	return de
}

// noRedirects returns client (http.DefaultClient when nil) made not to
// follow redirects, unless it has a CheckRedirect of its own: followed,
// a redirect sent the secret URL on in the Referer header, turned the POST
// of a 301, 302 or 303 into a GET without the event (and a success), and
// could go on over plain http. The 3xx is answered as a failed delivery.
func noRedirects(client *http.Client) *http.Client {
	if client == nil {
		client = http.DefaultClient
	}
	if client.CheckRedirect != nil {
		return client
	}
	c := *client
	c.CheckRedirect = useLastResponse
	return &c
}

func useLastResponse(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// checkURL accepts an https URL, or an http one to a loopback address.
// The URL is a secret: errors never quote it.
func checkURL(name, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return &DeliveryError{Notifier: name, Err: errInvalidURL}
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !isLoopback(u.Hostname())) {
		return fmt.Errorf("%w (%s)", ErrInsecureURL, name)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
