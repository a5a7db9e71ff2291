package notify

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// message is an event laid out for people: a title, a one-paragraph
// summary, and labelled fields.
type message struct {
	title, summary string
	fields         [][2]string
}

// render lays out e for Slack and Telegram.
func render(e selfimprove.Event) message {
	m := message{title: titleOf(e), summary: summaryOf(e)}
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
		agents := s.Agents
		if len(agents) > maxSummaryAgents {
			// The least healthy first: a chat message has room for some
			// (Slack takes 50 blocks, Telegram 4,096 characters).
			agents = slices.Clone(agents)
			slices.SortStableFunc(agents, func(a, b selfimprove.AgentView) int { return cmp.Compare(a.Health, b.Health) })
			agents = agents[:maxSummaryAgents]
		}
		for _, a := range agents {
			add(a.AgentID, fmt.Sprintf("%d calls, %.1f%% success, health %.2f; changes: %d applied, %d confirmed, %d rolled back",
				a.Stats.CallsPerDay, 100*a.Stats.SuccessRate, a.Health, a.Applied, a.Confirmed, a.RolledBack))
		}
		if more := len(s.Agents) - len(agents); more > 0 {
			add("…", fmt.Sprintf("and %d more agents, each at least as healthy", more))
		}
	}
	return m
}

// maxSummaryAgents is how many agents a daily summary's message lists:
// the least healthy, when there are more.
const maxSummaryAgents = 40

// summaryOf is e's message with a verdict's statistics left out: the
// verdict's plain first sentence, up to its first "; ", ends it (the
// Verdict field shows the verdict whole).
func summaryOf(e selfimprove.Event) string {
	c := e.Change
	if c == nil || c.Verdict == "" || !strings.HasSuffix(e.Message, c.Verdict) {
		return e.Message
	}
	plain, _, _ := strings.Cut(c.Verdict, "; ")
	return strings.TrimSuffix(e.Message, c.Verdict) + plain
}

func titleOf(e selfimprove.Event) string {
	switch e.Type {
	case selfimprove.EventImprovementApplied:
		return "Improvement applied"
	case selfimprove.EventChangeConfirmed:
		return "Change confirmed"
	case selfimprove.EventRolledBack:
		return "Rolled back"
	case selfimprove.EventRollbackFailed:
		return "Rollback not recorded"
	case selfimprove.EventProposalFiled:
		return "Proposal for review"
	case selfimprove.EventProposalApproved:
		return "Proposal approved"
	case selfimprove.EventProposalRejected:
		return "Proposal rejected"
	case selfimprove.EventCircuitOpened:
		return "Circuit opened"
	case selfimprove.EventCircuitClosed:
		return "Circuit closed"
	case selfimprove.EventDigest:
		return fmt.Sprintf("%d events", len(e.Digest))
	case selfimprove.EventDailySummary:
		return "Daily summary"
	}
	return strings.ReplaceAll(string(e.Type), "_", " ")
}

func describeConfig(c selfimprove.Config) string {
	parts := []string{fmt.Sprintf("v%d", c.Version)}
	if c.Timeout > 0 {
		parts = append(parts, "timeout "+c.Timeout.String())
	}
	if c.FirstTokenTimeout > 0 {
		parts = append(parts, "first token within "+c.FirstTokenTimeout.String())
	}
	parts = append(parts, fmt.Sprintf("%d attempt(s)", max(c.MaxAttempts, 1)))
	if c.Backoff > 0 {
		parts = append(parts, "backoff "+c.Backoff.String())
	}
	if c.Route != "" {
		parts = append(parts, "route "+c.Route)
	}
	return strings.Join(parts, ", ")
}

func describeStats(s selfimprove.Stats) string {
	return fmt.Sprintf("%.1f%% success over %d calls, average latency %v", 100*s.SuccessRate, s.Calls, s.AvgLatency)
}

// cut shortens s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutUTF16 returns the longest prefix of s, cut at a character, that is
// at most n UTF-16 code units long (Telegram's count), that length, and
// whether the prefix is s whole. A byte that is not UTF-8 counts one: JSON
// sends it as U+FFFD.
func cutUTF16(s string, n int) (prefix string, units int, whole bool) {
	for i, r := range s {
		u := utf16.RuneLen(r)
		if units+u > n {
			return s[:i], units, false
		}
		units += u
	}
	return s, units, true
}
