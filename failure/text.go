package failure

import (
	"strings"
	"unicode/utf8"
)

// MaxText is how many bytes of an error's text the loop keeps per
// failure (Text cuts to it).
const MaxText = 200

// maxScrubText is how much of an error's text the loop reads and scrubs;
// MaxText bytes of the result are kept.
const maxScrubText = 1024

// Text returns the text of err to keep: its first maxScrubText bytes,
// scrubbed of secrets, cut to MaxText bytes at a rune boundary. When the
// text is longer, its last word before the cut (what follows the last
// white space) is redacted with the secrets: it may be the start of one,
// too short to be recognised. A long text is copied so that the kept part
// does not pin the rest in memory.
func Text(err error) string { return keepText(textN(err, maxScrubText+utf8.UTFMax)) }

// keepText returns the first maxScrubText bytes of s, scrubbed (a last
// word cut at maxScrubText redacted), cut to MaxText bytes and copied
// when cut.
func keepText(s string) string {
	if len(s) > maxScrubText {
		s = s[:cutAt(s, maxScrubText)]
		if i := strings.LastIndexAny(s, " \t\r\n"); i < len(s)-1 {
			s = s[:i+1] + Redacted
		}
	}
	s = Scrub(s)
	if len(s) <= MaxText {
		return s
	}
	return strings.Clone(s[:cutAt(s, MaxText)])
}

// textN returns err's text cut to at most n bytes at a rune boundary.
// A panic in err.Error is caught.
func textN(err error, n int) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = "selfimprove: Error method panicked"
		}
	}()
	s = err.Error()
	if len(s) > n {
		s = s[:cutAt(s, n)]
	}
	return s
}

// Bound returns s if it is at most n bytes; otherwise its first bytes
// cut at a rune boundary and followed by "…", n bytes at most in all (a
// new string, so that the kept part does not pin the rest in memory). An n
// too small for the ellipsis gets a plain cut.
func Bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	if n < len(ellipsis) {
		return strings.Clone(s[:cutAt(s, max(n, 0))])
	}
	return s[:cutAt(s, n-len(ellipsis))] + ellipsis
}

// cutAt returns the largest rune boundary of s at or before n.
func cutAt(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
