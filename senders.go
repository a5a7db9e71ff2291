package selfimprove

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove/failure"
)

// Notifiers fans an event out to several notifiers. Its Notify calls each
// in turn and joins their errors. When the loop delivers to Notifiers, it
// retries each notifier on its own, so that one that succeeded is not sent
// the event again.
type Notifiers []Notifier

// Notify calls each notifier with e.
func (ns Notifiers) Notify(ctx context.Context, e Event) error {
	var errs []error
	for _, n := range ns {
		if err := n.Notify(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ErrInsecureURL: a sender's URL is not https. Plain http is accepted for
// loopback addresses only (localhost, 127.0.0.0/8, ::1), for tests.
var ErrInsecureURL = errors.New("selfimprove: notifier URL must be https (http only on loopback)")

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
		return fmt.Sprintf("selfimprove: %s: %v", e.Notifier, e.Err)
	case e.Wait > 0:
		return fmt.Sprintf("selfimprove: %s: HTTP %d (retry after %v)", e.Notifier, e.Status, e.Wait)
	}
	return fmt.Sprintf("selfimprove: %s: HTTP %d", e.Notifier, e.Status)
}

// Unwrap returns the transport error.
func (e *DeliveryError) Unwrap() error { return e.Err }

// Retryable reports whether another attempt may succeed: on a transport
// error, 429 and 5xx; not on other statuses.
func (e *DeliveryError) Retryable() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// RetryAfter returns the wait the receiver asked for.
func (e *DeliveryError) RetryAfter() time.Duration { return e.Wait }

// post sends body to rawURL as JSON and maps the outcome. name names the
// sender in errors.
func post(ctx context.Context, client *http.Client, name, rawURL string, body []byte, header http.Header) error {
	if err := checkURL(name, rawURL); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return &DeliveryError{Notifier: name, Err: errors.New("cannot build the request")}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
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
	de := &DeliveryError{Notifier: name, Status: resp.StatusCode, Wait: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
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

// checkURL accepts an https URL, or an http one to a loopback address.
// The URL is a secret: errors never quote it.
func checkURL(name, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return &DeliveryError{Notifier: name, Err: errors.New("invalid URL")}
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !isLoopback(u.Hostname())) {
		return fmt.Errorf("%w (%s)", ErrInsecureURL, name)
	}
	return nil
}

// checkNotifier checks the URLs of the built-in notifiers in n, so that
// New reports a bad one at once rather than at the first delivery.
func checkNotifier(n Notifier) error {
	switch n := n.(type) {
	case SlackNotifier:
		return checkURL("slack", n.WebhookURL)
	case *SlackNotifier:
		return checkURL("slack", n.WebhookURL)
	case TelegramNotifier:
		return n.check()
	case *TelegramNotifier:
		return n.check()
	case WebhookNotifier:
		return checkURL("webhook", n.URL)
	case *WebhookNotifier:
		return checkURL("webhook", n.URL)
	case Notifiers:
		for _, m := range n {
			if err := checkNotifier(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return max(time.Duration(n)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SlackNotifier posts events to a Slack incoming webhook: a plain-text
// summary in "text" (what notifications show) and Block Kit "blocks" with
// the agent, the change from one config to the other, the reason, and
// the success rate and average latency before and after.
type SlackNotifier struct {
	// WebhookURL is the incoming webhook's URL. It is a secret: it never
	// appears in errors or logs.
	WebhookURL string
	// Client sends the requests; nil means http.DefaultClient.
	Client *http.Client
}

// Notify posts e.
func (n SlackNotifier) Notify(ctx context.Context, e Event) error {
	m := render(e)
	esc := func(s string) string { // Slack's mrkdwn and plain_text escaping
		return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
	}
	type text struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type block struct {
		Type   string `json:"type"`
		Text   *text  `json:"text,omitempty"`
		Fields []text `json:"fields,omitempty"`
	}
	blocks := []block{
		{Type: "header", Text: &text{"plain_text", cut(m.title, 150)}},
		{Type: "section", Text: &text{"mrkdwn", cut(esc(m.summary), 3000)}},
	}
	var fields []text
	for _, f := range m.fields {
		fields = append(fields, text{"mrkdwn", cut("*"+esc(f[0])+"*\n"+esc(f[1]), 2000)})
		if len(fields) == 10 { // Slack's limit per section
			blocks = append(blocks, block{Type: "section", Fields: fields})
			fields = nil
		}
	}
	if len(fields) > 0 {
		blocks = append(blocks, block{Type: "section", Fields: fields})
	}
	body, err := json.Marshal(struct {
		Text   string  `json:"text"`
		Blocks []block `json:"blocks"`
	}{esc(m.title + ": " + m.summary), blocks})
	if err != nil {
		return err
	}
	return post(ctx, n.Client, "slack", n.WebhookURL, body, nil)
}

// TelegramNotifier sends events through a Telegram bot: the Bot API's
// sendMessage, with the text in HTML (escaped as that parse mode needs).
type TelegramNotifier struct {
	// Token is the bot's token. It is a secret: it never appears in
	// errors or logs.
	Token string
	// ChatID is the chat to write to: a numeric ID or "@channelname".
	ChatID string
	// BaseURL is the Bot API's address; default https://api.telegram.org.
	// It exists for tests and proxies.
	BaseURL string
	// Client sends the requests; nil means http.DefaultClient.
	Client *http.Client
}

// Notify sends e.
func (n TelegramNotifier) Notify(ctx context.Context, e Event) error {
	m := render(e)
	var b strings.Builder
	b.WriteString("<b>" + html.EscapeString(m.title) + "</b>\n" + html.EscapeString(m.summary))
	for _, f := range m.fields {
		b.WriteString("\n<b>" + html.EscapeString(f[0]) + ":</b> " + html.EscapeString(f[1]))
	}
	text := b.String()
	if len(text) > 4000 { // the API takes 4,096 characters; cut at a line
		if i := strings.LastIndexByte(text[:4000], '\n'); i > 0 {
			text = text[:i]
		}
	}
	body, err := json.Marshal(struct {
		ChatID    string `json:"chat_id"`
		Text      string `json:"text"`
		ParseMode string `json:"parse_mode"`
		NoPreview bool   `json:"disable_web_page_preview"`
	}{n.ChatID, text, "HTML", true})
	if err != nil {
		return err
	}
	return post(ctx, n.Client, "telegram", n.base()+"/bot"+n.Token+"/sendMessage", body, nil)
}

func (n TelegramNotifier) base() string {
	if b := strings.TrimSuffix(n.BaseURL, "/"); b != "" {
		return b
	}
	return "https://api.telegram.org"
}

// check checks the Bot API's address, and that the token and the chat
// are set.
func (n TelegramNotifier) check() error {
	if n.Token == "" || n.ChatID == "" {
		return &DeliveryError{Notifier: "telegram", Err: errors.New("token and chat ID are required")}
	}
	return checkURL("telegram", n.base())
}

// WebhookNotifier posts each event as JSON (the Event, as stored) to URL.
// With a Secret it signs the request so that the receiver can check it
// came from this loop and was not replayed:
//
//	X-Selfimprove-Timestamp: <Unix seconds>
//	X-Selfimprove-Signature: sha256=<hex HMAC-SHA256(Secret, timestamp + "." + body)>
//
// The receiver recomputes the HMAC over the timestamp header, a dot and
// the raw body, compares it in constant time (hmac.Equal), and rejects a
// timestamp older than it tolerates (5 minutes, say).
type WebhookNotifier struct {
	// URL is where events go. It is treated as a secret: it never appears
	// in errors or logs.
	URL string
	// Secret is the HMAC key; empty means unsigned requests.
	Secret string
	// Client sends the requests; nil means http.DefaultClient.
	Client *http.Client
}

// Notify posts e.
func (n WebhookNotifier) Notify(ctx context.Context, e Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	h := http.Header{}
	if n.Secret != "" {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(n.Secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		h.Set("X-Selfimprove-Timestamp", ts)
		h.Set("X-Selfimprove-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	return post(ctx, n.Client, "webhook", n.URL, body, h)
}

// message is an event laid out for people: a title, a one-paragraph
// summary, and labelled fields.
type message struct {
	title, summary string
	fields         [][2]string
}

// render lays out e for Slack and Telegram.
func render(e Event) message {
	m := message{title: titleOf(e), summary: e.Message}
	add := func(k, v string) { m.fields = append(m.fields, [2]string{k, v}) }
	if e.AgentID != "" {
		add("Agent", e.AgentID)
	}
	if c := e.Change; c != nil {
		add("Change", fmt.Sprintf("v%d → v%d", c.From.Version, c.To.Version))
		add("From", describeConfig(c.From))
		add("To", describeConfig(c.To))
		if c.Reason != "" {
			add("Reason", c.Reason)
		}
		add("Before", describeStats(c.Before))
		if c.After.Calls > 0 {
			add("After", describeStats(c.After))
		}
		if c.Verdict != "" {
			add("Verdict", c.Verdict)
		}
	}
	if p := e.Proposal; p != nil {
		add("Proposal", fmt.Sprintf("%s (%s, %s, %d failures, confidence %.0f%%)", p.ID, p.Class, p.RootCause, p.Count, 100*p.Confidence))
		if p.Rule != "" {
			add("Suggestion", p.Rule)
		}
		if p.Config != nil {
			add("Suggested config", describeConfig(*p.Config))
		}
		if len(p.Examples) > 0 {
			add("Example", p.Examples[len(p.Examples)-1])
		}
	}
	if e.Err != "" {
		add("Error", failure.Scrub(e.Err))
	}
	for i, d := range e.Digest {
		if i == 20 {
			add("…", fmt.Sprintf("and %d more", len(e.Digest)-i))
			break
		}
		add(d.Time.UTC().Format("15:04:05"), d.Message)
	}
	if s := e.Summary; s != nil {
		for _, a := range s.Agents {
			add(a.AgentID, fmt.Sprintf("%d calls, %.1f%% success, health %.2f; changes: %d applied, %d confirmed, %d rolled back",
				a.Calls, 100*a.SuccessRate, a.Health, a.Applied, a.Confirmed, a.RolledBack))
		}
	}
	return m
}

func titleOf(e Event) string {
	switch e.Type {
	case EventImprovementApplied:
		return "Improvement applied"
	case EventChangeConfirmed:
		return "Change confirmed"
	case EventRolledBack:
		return "Rolled back"
	case EventRollbackFailed:
		return "Rollback not recorded"
	case EventProposalFiled:
		return "Proposal for review"
	case EventProposalApproved:
		return "Proposal approved"
	case EventProposalRejected:
		return "Proposal rejected"
	case EventCircuitOpened:
		return "Circuit opened"
	case EventCircuitClosed:
		return "Circuit closed"
	case EventDigest:
		return fmt.Sprintf("%d events", len(e.Digest))
	case EventDailySummary:
		return "Daily summary"
	}
	return strings.ReplaceAll(string(e.Type), "_", " ")
}

func describeConfig(c Config) string {
	parts := []string{fmt.Sprintf("v%d", c.Version)}
	if c.Timeout > 0 {
		parts = append(parts, "timeout "+c.Timeout.String())
	}
	parts = append(parts, fmt.Sprintf("%d attempt(s)", c.attempts()))
	if c.Backoff > 0 {
		parts = append(parts, "backoff "+c.Backoff.String())
	}
	if c.Route != "" {
		parts = append(parts, "route "+c.Route)
	}
	return strings.Join(parts, ", ")
}

func describeStats(s Stats) string {
	return fmt.Sprintf("%.1f%% success over %d calls, average latency %v", 100*s.SuccessRate, s.Calls, s.AvgLatency)
}

// cut shortens s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
