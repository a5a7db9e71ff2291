package notify_test

import (
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/notify"
)

// Senders from the environment: only those whose variables are set, and
// the log beside them, so that an unset variable neither fails New
// ("slack: invalid URL") nor loses the events.
func Example_fromEnvironment() {
	// guide:begin
	senders := []selfimprove.Notifier{notify.Log{}} // events are logged beside the senders
	if u := os.Getenv("SLACK_WEBHOOK_URL"); u != "" {
		senders = append(senders, notify.Slack{WebhookURL: u})
	}
	if tok := os.Getenv("TELEGRAM_BOT_TOKEN"); tok != "" {
		senders = append(senders, notify.Telegram{Token: tok, ChatID: "-1001234567890"})
	}
	if secret := os.Getenv("HOOK_SECRET"); secret != "" {
		senders = append(senders, notify.Webhook{URL: "https://ops.example.com/hooks/selfimprove", Secret: secret})
	}
	loop, err := selfimprove.New(
		selfimprove.WithNotifier(senders...),
		selfimprove.WithDailySummary(9*time.Hour), // every day at 09:00 UTC
		// guide:end
		selfimprove.WithStore(selfimprove.NewRAMStore()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()
	fmt.Println("senders:", len(senders))
	// Output: senders: 1
}

// TestGuideNotifiersAreTheExample: the guide's notifier block is
// Example_fromEnvironment's, which runs (issue 43: the guide's block
// failed New with "slack: invalid URL" when SLACK_WEBHOOK_URL was unset).
func TestGuideNotifiersAreTheExample(t *testing.T) {
	src, err := os.ReadFile("env_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../docs/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	block := s[strings.Index(s, "// guide:begin\n")+len("// guide:begin\n") : strings.Index(s, "\t\t// guide:end")]
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	want := strings.Join(lines, "\n")
	if !strings.Contains(string(guide), want) {
		t.Errorf("docs/guide.md lacks the notifier block of Example_fromEnvironment:\n%s", want)
	}
}
