package main

import (
	"fmt"
	"time"
)

// nextText is an agent's next step as the CLI shows it: "cooling down;
// next: route "gpt-4o-mini"… (at 2026-11-24 14:20)".
func nextText(next string, at time.Time) string {
	if next == "" {
		return "-"
	}
	if at.IsZero() {
		return cell(next)
	}
	return fmt.Sprintf("%s (at %s)", cell(next), at.Format("2006-01-02 15:04"))
}
