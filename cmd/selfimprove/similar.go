package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

func runSimilar(ctx context.Context, e *env, args []string) error {
	if e.o.k < 1 || e.o.k > 100 {
		return usageErr("-k: %d is not in 1..100", e.o.k)
	}
	if similarText(args[0]) == "" {
		return usageErr("TEXT is blank: give the failure's message")
	}
	return withClient(e, false, func(c *client) error {
		list, err := similar(ctx, c, args[0], e.o.k)
		if err != nil {
			return err
		}
		if e.o.json {
			return printJSON(e.stdout, list)
		}
		if len(list.Memories) == 0 {
			fmt.Fprintln(e.stdout, "No similar failures remembered.")
			return nil
		}
		tw := table(e.stdout)
		fmt.Fprintln(tw, "SIMILARITY\tCLUSTER\tCLASS\tCOUNT\tAGENTS\tLAST SEEN\tSIGNATURE")
		for _, m := range list.Memories {
			fmt.Fprintf(tw, "%.0f%%\t%s\t%s\t%d\t%d\t%s\t%s\n", 100*m.Similarity, cell(m.Cluster), cell(string(m.Class)), m.Count, len(m.Agents),
				m.LastSeen.UTC().Format(time.DateTime), cell(m.Signature))
			for _, f := range m.Fixes {
				fmt.Fprintf(tw, "\t  fix\t%s\t\t\t%s\t%s\n", cell(string(f.State)), f.Time.UTC().Format(time.DateTime), cell(fixText(f)))
			}
		}
		return tw.Flush()
	})
}

// fixText says what a remembered fix changed, on which agent, and why.
func fixText(f selfimprove.Fix) string {
	what := "proposal " + f.ProposalID
	if f.ChangeID != "" {
		what = fmt.Sprintf("v%d→v%d %s", f.From.Version, f.To.Version, changeText(f.From, f.To))
	}
	return fmt.Sprintf("%s on %q: %s", what, f.AgentID, f.Reason)
}

// changeText names the fields a change set, old → new.
func changeText(from, to selfimprove.Config) string {
	var parts []string
	add := func(name string, a, b any) {
		if a != b {
			parts = append(parts, fmt.Sprintf("%s %v→%v", name, a, b))
		}
	}
	add("timeout", from.Timeout, to.Timeout)
	add("attempts", max(from.MaxAttempts, 1), max(to.MaxAttempts, 1))
	add("backoff", from.Backoff, to.Backoff)
	add("route", from.Route, to.Route)
	add("first_token_timeout", from.FirstTokenTimeout, to.FirstTokenTimeout)
	if !maps.Equal(from.Params, to.Params) {
		parts = append(parts, "params")
	}
	if len(parts) == 0 {
		return "(no field)"
	}
	return strings.Join(parts, ", ")
}

// maxSimilarText is the admin API's bound on the text of /api/similar, in
// bytes.
const maxSimilarText = 4096

// similarText is text as similar sends it: without its surrounding blanks,
// and cut to its first maxSimilarText bytes, at a character's start (a
// stack trace's head is the failure's message). It is "" for a blank text.
func similarText(text string) string {
	text = strings.TrimSpace(text)
	if len(text) <= maxSimilarText {
		return text
	}
	cut := maxSimilarText
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// similar returns the k remembered failures most similar to text, which
// the caller checked is not blank.
func similar(ctx context.Context, c *client, text string, k int) (admin.SimilarList, error) {
	var list admin.SimilarList
	err := c.get(ctx, "/api/similar", url.Values{"q": {similarText(text)}, "k": {strconv.Itoa(k)}}, &list)
	list.Memories = nonNil(list.Memories)
	return list, err
}
