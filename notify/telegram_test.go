package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/notify"
)

// telegramBot is a Bot API server that checks a sendMessage as Telegram
// does: the text valid UTF-8, its HTML parse mode valid (only known tags,
// each closed in order; '<', '>' and '&' only as tags and entities), and
// the text after parsing at most 4,096 UTF-16 code units. It answers 400,
// as Telegram does, otherwise, and keeps the last text it accepted, as
// parsed.
type telegramBot struct {
	t    *testing.T
	text string // the last text accepted, after parsing
}

func (b *telegramBot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct {
		Text      string `json:"text"`
		ParseMode string `json:"parse_mode"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &msg); err != nil || msg.ParseMode != "HTML" {
		b.reject(w, fmt.Sprintf("not an HTML sendMessage: %v %s", err, body))
		return
	}
	plain, err := parseTelegramHTML(msg.Text)
	if err != nil {
		b.reject(w, "can't parse entities: "+err.Error())
		return
	}
	if n := len(utf16.Encode([]rune(plain))); n > 4096 || n == 0 {
		b.reject(w, fmt.Sprintf("message is too long (%d UTF-16 code units)", n))
		return
	}
	b.text = plain
	io.WriteString(w, `{"ok":true,"result":{}}`)
}

func (b *telegramBot) reject(w http.ResponseWriter, why string) {
	b.t.Errorf("Telegram would answer 400: %s", why)
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"ok":false,"error_code":400,"description":%q}`, "Bad Request: "+why)
}

var telegramEntity = regexp.MustCompile(`^&(lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);`)

// parseTelegramHTML returns the text Telegram shows for s in its HTML
// parse mode (the tags used here, b and i, and the entities it knows), or
// why it cannot parse it.
func parseTelegramHTML(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("text must be encoded in UTF-8")
	}
	var out strings.Builder
	var open []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			end := strings.IndexByte(s[i:], '>')
			if end < 0 {
				return "", fmt.Errorf("unclosed start tag at byte offset %d", i)
			}
			tag := s[i+1 : i+end]
			switch {
			case tag == "b" || tag == "i":
				open = append(open, tag)
			case strings.HasPrefix(tag, "/"):
				if len(open) == 0 || open[len(open)-1] != tag[1:] {
					return "", fmt.Errorf("unmatched end tag at byte offset %d, expected \"</%v>\"", i, open)
				}
				open = open[:len(open)-1]
			default:
				return "", fmt.Errorf("unsupported start tag %q at byte offset %d", tag, i)
			}
			i += end + 1
		case '&':
			m := telegramEntity.FindString(s[i:])
			if m == "" {
				return "", fmt.Errorf("character '&' is reserved and must be escaped, at byte offset %d", i)
			}
			switch m {
			case "&lt;":
				out.WriteByte('<')
			case "&gt;":
				out.WriteByte('>')
			case "&amp;":
				out.WriteByte('&')
			case "&quot;":
				out.WriteByte('"')
			default:
				n, _ := strconv.ParseInt(strings.TrimPrefix(m[2:len(m)-1], "x"), map[bool]int{true: 16, false: 10}[m[2] == 'x'], 32)
				out.WriteRune(rune(n))
			}
			i += len(m)
		case '>':
			return "", fmt.Errorf("character '>' is reserved, at byte offset %d", i)
		default:
			out.WriteByte(s[i])
			i++
		}
	}
	if len(open) > 0 {
		return "", fmt.Errorf("can't find end tag corresponding to start tag %q", open[len(open)-1])
	}
	return out.String(), nil
}

// TestTelegramLongTextIsCutToFit: sendMessage takes 4,096 characters,
// counted in UTF-16 code units after the HTML is parsed. A longer message
// is cut to fit, at a character, never inside a tag or an entity, and
// "…" marks the cut. Before, the text was cut at its last line break
// within 4,000 bytes: a long summary (one line) was left out whole and
// the message showed the title only, with no sign of the cut; a text in
// Cyrillic, two bytes a letter, was cut at half the room Telegram gives;
// and a line break inside an agent's ID cut a <b> tag open, which
// Telegram refuses (400 "can't parse entities").
func TestTelegramLongTextIsCutToFit(t *testing.T) {
	bot := &telegramBot{t: t}
	srv := httptest.NewServer(bot)
	defer srv.Close()
	n := notify.Telegram{Token: "123:abc", ChatID: "42", BaseURL: srv.URL}
	send := func(e si.Event) string {
		t.Helper()
		bot.text = ""
		if err := n.Notify(context.Background(), e); err != nil {
			t.Fatalf("%s: %v", e.ID, err)
		}
		return bot.text
	}
	units := func(s string) int { return len(utf16.Encode([]rune(s))) }

	long := strings.Repeat("a <b> & \"c\" 🙂 é ", 400) // 6,800 units on one line
	got := send(si.Event{ID: "long", Type: si.EventConfigSet, Message: long})
	if !strings.HasPrefix(got, "config set\n"+long[:2000]) || !strings.HasSuffix(got, "…") || units(got) < 4090 {
		t.Errorf("a long summary is not cut to fit and marked (%d units): %.200q…%q", units(got), got, got[max(len(got)-40, 0):])
	}

	cyrillic := strings.Repeat("откат конфигурации ", 150) // 2,850 letters, 5,400 bytes
	if got := send(si.Event{ID: "cyrillic", Type: si.EventConfigSet, Message: cyrillic}); got != "config set\n"+cyrillic {
		t.Errorf("a summary of 2,850 Cyrillic letters, which fits, was cut to %d units: %.100q", units(got), got)
	}

	s := &si.Summary{}
	for i := range 40 {
		s.Agents = append(s.Agents, si.AgentView{AgentID: fmt.Sprintf("team <%02d>\n%s", i, strings.Repeat("x", 60)), Health: 1})
	}
	got = send(si.Event{ID: "summary", Type: si.EventDailySummary, Message: "daily summary", Summary: s})
	if !strings.HasSuffix(got, "…") || !strings.Contains(got, "team <00>\n") {
		t.Errorf("a daily summary too long for a message is not cut to fit and marked: …%q", got[max(len(got)-80, 0):])
	}
}
