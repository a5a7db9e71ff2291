package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
)

// Slack posts events to a Slack incoming webhook: a plain-text summary in
// "text" (what notifications show) and Block Kit "blocks" with the agent,
// the change from one config to the other, the reason, and the success
// rate and average latency before and after.
type Slack struct {
	// WebhookURL is the incoming webhook's URL; required, https (http
	// only on loopback). It is a secret: it never appears in errors or
	// logs.
	WebhookURL string
	// Client sends the requests; nil (the default) means
	// http.DefaultClient.
	Client *http.Client
}

// Validate checks WebhookURL: https, or http to a loopback address.
func (n Slack) Validate() error { return checkURL("slack", n.WebhookURL) }

// Notify posts e.
func (n Slack) Notify(ctx context.Context, e selfimprove.Event) error {
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
		return fmt.Errorf("notify: slack: %w", err)
	}
	return post(ctx, n.Client, "slack", n.WebhookURL, body, nil)
}

// Telegram sends events through a Telegram bot: the Bot API's
// sendMessage, with the text in HTML (escaped as that parse mode needs).
type Telegram struct {
	// Token is the bot's token; required. It is a secret: it never
	// appears in errors or logs.
	Token string
	// ChatID is the chat to write to, a numeric ID or "@channelname";
	// required.
	ChatID string
	// BaseURL is the Bot API's address; default https://api.telegram.org.
	// It exists for tests and proxies.
	BaseURL string
	// Client sends the requests; nil (the default) means
	// http.DefaultClient.
	Client *http.Client
}

// Validate checks that Token and ChatID are set, that Token can stand in
// a URL's path as it is (no space, newline, '/', '?', '#' or '%': a token
// read from a file often ends in a newline), and the Bot API's address:
// https, or http to a loopback address.
func (n Telegram) Validate() error {
	if n.Token == "" || n.ChatID == "" {
		return &DeliveryError{Notifier: "telegram", Err: errors.New("token and chat ID are required")}
	}
	if err := checkToken(n.Token); err != nil {
		return err
	}
	return checkURL("telegram", n.base())
}

// checkToken refuses a bot token that a URL's path cannot carry as it is.
// The token is a secret: the error never quotes it.
func checkToken(token string) error {
	if url.PathEscape(token) != token {
		return &DeliveryError{Notifier: "telegram", Err: fmt.Errorf("%w: the token holds a space, a newline or one of / ? # %%", errInvalidURL)}
	}
	return nil
}

// Notify sends e.
func (n Telegram) Notify(ctx context.Context, e selfimprove.Event) error {
	body, err := json.Marshal(struct {
		ChatID    string `json:"chat_id"`
		Text      string `json:"text"`
		ParseMode string `json:"parse_mode"`
		NoPreview bool   `json:"disable_web_page_preview"`
	}{n.ChatID, telegramText(render(e)), "HTML", true})
	if err != nil {
		return fmt.Errorf("notify: telegram: %w", err)
	}
	if err := checkToken(n.Token); err != nil {
		return err
	}
	return post(ctx, n.Client, "telegram", n.base()+"/bot"+n.Token+"/sendMessage", body, nil)
}

// telegramMax is the longest text sendMessage takes: 4,096 characters,
// which Telegram counts in UTF-16 code units of the text as shown (after
// the HTML is parsed: tags count nothing, an entity one).
const telegramMax = 4096

// telegramText lays m out in Telegram's HTML: the title in bold, the
// summary, and a line per field, its name in bold. A text longer than
// telegramMax is cut at a character and ends with "…". The plain text is
// cut before it is escaped, so that no cut falls inside a tag or an
// entity.
func telegramText(m message) string {
	var b strings.Builder
	left := telegramMax - 1 // less the room of the "…" that marks a cut
	// put writes s, or as much of it as fits, and reports whether it was
	// whole.
	put := func(s string, bold bool) bool {
		part, n, whole := cutUTF16(s, left)
		left -= n
		if part = html.EscapeString(part); bold && part != "" {
			part = "<b>" + part + "</b>"
		}
		b.WriteString(part)
		return whole
	}
	whole := put(m.title, true) && put("\n"+m.summary, false)
	for _, f := range m.fields {
		whole = whole && put("\n", false) && put(f[0]+":", true) && put(" "+f[1], false)
	}
	if !whole {
		b.WriteString("…")
	}
	return b.String()
}

func (n Telegram) base() string {
	if b := strings.TrimSuffix(n.BaseURL, "/"); b != "" {
		return b
	}
	return "https://api.telegram.org"
}

// Webhook posts each event as JSON (the selfimprove.Event, as stored) to
// URL. With a Secret it signs the request so that the receiver can check
// it came from this loop and was not replayed:
//
//	X-Selfimprove-Timestamp: <Unix seconds>
//	X-Selfimprove-Signature: sha256=<hex HMAC-SHA256(Secret, timestamp + "." + body)>
//
// The receiver recomputes the HMAC over the timestamp header, a dot and
// the raw body, compares it in constant time (hmac.Equal), and rejects a
// timestamp older than it tolerates (5 minutes, say).
type Webhook struct {
	// URL is where events go; required, https (http only on loopback).
	// It is treated as a secret: it never appears in errors or logs.
	URL string
	// Secret is the HMAC key; empty (the default) means unsigned
	// requests.
	Secret string
	// Client sends the requests; nil (the default) means
	// http.DefaultClient.
	Client *http.Client
}

// Validate checks URL: https, or http to a loopback address.
func (n Webhook) Validate() error { return checkURL("webhook", n.URL) }

// Notify posts e.
func (n Webhook) Notify(ctx context.Context, e selfimprove.Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("notify: webhook: %w", err)
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

// Log logs each event through Logger, as a Loop without WithNotifier
// does through its own logger: the event's message, and its attributes
// (selfimprove.Event.LogValue), at the event's Level (Warn for what may
// need a person, Info for the loop's decisions, Debug for operator
// actions), a digest as its events. Use it to log events beside other
// senders.
type Log struct {
	// Logger is where events go; nil (the default) means slog.Default().
	Logger *slog.Logger
}

// Notify logs e. It never fails.
func (n Log) Notify(ctx context.Context, e selfimprove.Event) error {
	l := n.Logger
	if l == nil {
		l = slog.Default()
	}
	if e.Type == selfimprove.EventDigest && len(e.Digest) > 0 {
		for _, d := range e.Digest {
			n.Notify(ctx, d)
		}
		return nil
	}
	if level := e.Level(); l.Enabled(ctx, level) {
		l.LogAttrs(ctx, level, "selfimprove: "+e.Message, e.LogValue().Group()...)
	}
	return nil
}
