package failure

import (
	"unicode"
	"unicode/utf8"
)

// A text rule: a phrase of lowercase ASCII words that must appear as
// consecutive words. need, when set, is a word that must also appear
// somewhere in the text. Among the rules that match, the one with the
// highest prio wins; a status code has prio statusPrio.
type textRule struct {
	words []string
	class Class
	prio  int
	need  string
	bare  bool // only in a text without an HTTP status
}

const statusPrio = 50

// Phrases. Specific ones (prio > statusPrio) beat a status code; generic
// ones give way to it.
var textRules = func() []textRule {
	type group struct {
		class   Class
		prio    int
		need    string
		phrases []string
	}
	groups := []group{
		{ClassModelUnavailable, 90, "model", []string{
			"not found", "does not exist", "deprecated", "decommissioned", "retired", "withdrawn",
			"discontinued", "no longer available", "has been removed"}},
		{ClassModelUnavailable, 90, "", []string{
			"model not found", "modelnotfound", "unknown model", "no such model", "invalid model",
			"model unavailable", "model is unavailable", "model not available", "model is not available"}},
		{ClassContextLength, 85, "", []string{
			"context length", "context window", "maximum context", "too many tokens",
			"token limit", "tokens exceeds", "tokens exceed", "prompt is too long", "input is too long",
			"max tokens exceeded", "context limit", "contextlength", "too long for context", "reduce the length",
			"input token count", "maximum number of tokens"}},
		// The Anthropic SDKs refuse, before sending it, a non-streaming
		// request whose max_tokens may take longer than 10 minutes: the
		// caller must stream it or lower max_tokens; a retry cannot help.
		{ClassBadRequest, 84, "", []string{"streaming is required", "streaming is strongly recommended"}},
		{ClassContentFilter, 80, "", []string{
			"content filter", "contentfilter", "content policy", "content management policy", "safety",
			"moderation", "flagged", "refused to", "refusal", "responsible ai", "harmful", "policy violation",
			"blocked by"}},
		// A limit that lifts within the minute names its wait: Gemini's
		// per-minute limits say "You exceeded your current quota ...
		// Please retry in 37.2s"; its daily one, and a spent balance,
		// name none.
		{ClassRateLimit, 77, "", []string{"please retry in"}},
		{ClassQuota, 76, "", []string{
			"current quota", "insufficient quota", "billing hard limit", "credit balance is too low",
			"specified api usage limits", "regain access on"}},
		{ClassRateLimit, 75, "", []string{
			"rate limit", "rate limited", "rate limits", "ratelimit", "ratelimited", "too many requests",
			"quota", "throttled", "throttling", "throttle", "resource exhausted", "requests per minute",
			"tokens per minute", "slow down", "request limit"}},
		{ClassAuth, 70, "", []string{
			"unauthorized", "unauthorised", "unauthenticated", "forbidden", "api key", "apikey",
			"authentication", "permission denied", "access denied", "not authorized", "invalid token",
			"expired token", "token expired", "invalid credentials", "credentials"}},
		{ClassEmptyResponse, 65, "", []string{
			"empty response", "empty reply", "empty completion", "empty output", "empty result",
			"empty body", "no content", "no choices", "no output", "no response", "blank response",
			"returned nothing", "response was empty", "response is empty"}},
		// A tool's own failure, in an agent's text; in a provider's error
		// (with its HTTP status) the words are about the request: a 400
		// over tool_call_id or tool_use blocks stays bad_request.
		{ClassToolError, 60, "", []string{
			"tool error", "tool failed", "tool call", "tool execution", "tool use", "function call",
			"tool invocation", "toolerror", "invalid tool", "unknown tool"}},
		{ClassOverloaded, 45, "", []string{
			"overloaded", "service unavailable", "server error", "internal error", "bad gateway",
			"gateway timeout", "upstream", "try again later", "capacity", "temporarily unavailable",
			"unavailable", "server is busy", "server busy", "overload"}},
		{ClassTimeout, 40, "", []string{
			"timeout", "timed out", "timedout", "deadline exceeded", "deadline", "time out", "took too long"}},
		{ClassNetwork, 35, "", []string{
			"connection refused", "connection reset", "connection closed", "connection aborted",
			"broken pipe", "no such host", "dns", "eof", "network unreachable", "host unreachable",
			"network is unreachable", "tls handshake", "dial tcp", "dial udp", "connection error",
			"network error", "socket hang up", "econnrefused", "econnreset"}},
		{ClassBadRequest, 30, "", []string{
			"bad request", "invalid request", "validation", "validate", "schema", "invalid argument",
			"malformed", "unprocessable", "invalid json", "missing required", "invalid parameter",
			"invalid value", "invalid input", "parse error", "failed to parse", "unexpected token"}},
		{ClassNotFound, 25, "", []string{"not found", "no such", "does not exist", "notfound"}},
		{ClassCanceled, 20, "", []string{"canceled", "cancelled"}},
	}
	var rules []textRule
	for _, g := range groups {
		for _, p := range g.phrases {
			var words []string
			forWords(p, func(lo, hi int) bool { words = append(words, p[lo:hi]); return true })
			rules = append(rules, textRule{words: words, class: g.class, prio: g.prio, need: g.need, bare: g.class == ClassToolError})
		}
	}
	// The caller's own verdict on an answer: only in a text without an
	// HTTP status, which a provider's error has.
	for _, p := range []string{
		"does not match schema", "doesn't match schema", "did not match schema", "does not match the schema",
		"schema validation", "failed validation", "validation failed", "output validation", "invalid output",
		"bad output", "malformed output", "cannot unmarshal", "unexpected end of json input", "invalid character",
		"failed to parse", "could not parse", "parse error", "missing required property", "missing required field",
		"model refused", "refused to", "refusal"} {
		var words []string
		forWords(p, func(lo, hi int) bool { words = append(words, p[lo:hi]); return true })
		rules = append(rules, textRule{words: words, class: ClassBadOutput, prio: 82, bare: true})
	}
	return rules
}()

// ruleIndex finds the text rules by their first word: an open-addressing
// table on the FNV-1a hash of the word, lower case.
type ruleSlot struct {
	h     uint64
	word  string
	rules []int32
}

var ruleIndex = func() []ruleSlot {
	t := make([]ruleSlot, 1024)
	for i, r := range textRules {
		w := r.words[0]
		h := fnvLower(w)
		for j := h & uint64(len(t)-1); ; j = (j + 1) & uint64(len(t)-1) {
			if t[j].word == "" {
				t[j] = ruleSlot{h: h, word: w}
			}
			if t[j].word == w {
				t[j].rules = append(t[j].rules, int32(i))
				break
			}
		}
	}
	return t
}()

// fnvLower returns the FNV-1a hash of w in ASCII lower case.
func fnvLower(w string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// rulesFor returns the indexes of the rules whose first word is w,
// compared case-insensitively.
func rulesFor(w string) []int32 {
	h := fnvLower(w)
	mask := uint64(len(ruleIndex) - 1)
	for j := h & mask; ; j = (j + 1) & mask {
		s := &ruleIndex[j]
		if s.word == "" {
			return nil
		}
		if s.h == h && equalFoldASCII(w, s.word) {
			return s.rules
		}
	}
}

// statusWords may precede an HTTP status in text.
var statusWords = map[string]bool{
	"http": true, "https": true, "status": true, "code": true, "error": true, "err": true,
	"response": true, "returned": true, "got": true, "received": true,
}

// maxTokens bounds the words of a text the classifier reads.
const maxTokens = 128

// classifyText classifies text, given the HTTP status the error reported
// (0 for none).
func classifyText(text string, status int) Class {
	var toks [maxTokens][2]uint16
	n := 0
	if len(text) > maxClassifyText {
		text = text[:maxClassifyText]
	}
	forWords(text, func(lo, hi int) bool {
		toks[n] = [2]uint16{uint16(lo), uint16(hi)}
		n++
		return n < maxTokens
	})
	word := func(i int) string { return text[toks[i][0]:toks[i][1]] }

	best, bestPrio := Class(""), -1
	if c := statusClass(status); c != "" {
		best, bestPrio = c, statusPrio
	}
	hasStatus := status != 0
	for i := 0; i < n && !hasStatus; i++ {
		if w := word(i); len(w) == 3 && isDigits(w) && statusContext(i, word) {
			hasStatus = statusClass(int(w[0]-'0')*100+int(w[1]-'0')*10+int(w[2]-'0')) != ""
		}
	}
	for i := 0; i < n; i++ {
		w := word(i)
		if isDigits(w) {
			if len(w) == 3 && bestPrio < statusPrio && statusContext(i, word) {
				if c := statusClass(int(w[0]-'0')*100 + int(w[1]-'0')*10 + int(w[2]-'0')); c != "" {
					best, bestPrio = c, statusPrio
				}
			}
			continue
		}
		if len(w) == 0 || len(w) > 24 || w[0] >= utf8.RuneSelf {
			continue // no rule word is that long, or not ASCII
		}
		for _, ri := range rulesFor(w) {
			r := &textRules[ri]
			if r.prio <= bestPrio || i+len(r.words) > n || r.bare && hasStatus {
				continue
			}
			match := true
			for j := 1; j < len(r.words); j++ {
				if !equalFoldASCII(word(i+j), r.words[j]) {
					match = false
					break
				}
			}
			if match && r.need != "" {
				match = false
				for j := 0; j < n; j++ {
					if w := word(j); equalFoldASCII(w, r.need) || equalFoldASCII(w, r.need+"s") {
						match = true
						break
					}
				}
			}
			if match {
				best, bestPrio = r.class, r.prio
			}
		}
	}
	if best == "" {
		return ClassOther
	}
	return best
}

// statusContext reports whether the number at word i reads as an HTTP
// status: it opens the text, or a status word comes before it with only
// numbers between (at most three words back).
func statusContext(i int, word func(int) string) bool {
	if i == 0 {
		return true
	}
	var buf [16]byte
	for j := i - 1; j >= 0 && j >= i-3; j-- {
		w := word(j)
		if isDigits(w) {
			continue
		}
		if len(w) > len(buf) {
			return false
		}
		lw, ok := lowerASCII(buf[:0], w)
		return ok && statusWords[string(lw)]
	}
	return false
}

// forWords calls f with the bounds of each word of s until f returns
// false. A word is a run of letters or digits, split where a lower-case
// letter is followed by an upper-case one ("rateLimit"), where an
// upper-case run meets a capitalised word ("HTTPError"), and between
// letters and digits ("HTTP429").
func forWords(s string, f func(lo, hi int) bool) {
	start, prev := -1, kindNone
	for i := 0; i < len(s); {
		var k uint8
		size := 1
		if c := s[i]; c < utf8.RuneSelf {
			k = asciiKind[c]
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			switch {
			case unicode.IsUpper(r):
				k = kindUpper
			case unicode.IsLetter(r), unicode.IsMark(r):
				k = kindLower
			case unicode.IsDigit(r):
				k = kindDigit
			}
		}
		split := false
		switch {
		case k == kindNone:
			split = true
		case start < 0:
		case prev == kindDigit && k != kindDigit, prev != kindDigit && k == kindDigit:
			split = true
		case prev == kindLower && k == kindUpper:
			split = true
		case prev == kindUpper && k == kindLower:
			// "HTTPError": the E starts a new word; the run so far
			// ends before it.
			j := i - 1
			for j > start && !utf8.RuneStart(s[j]) {
				j--
			}
			if j > start {
				if !f(start, j) {
					return
				}
				start = j
			}
		}
		if split && start >= 0 {
			if !f(start, i) {
				return
			}
			start = -1
		}
		if k != kindNone && start < 0 {
			start = i
		}
		prev = k
		i += size
	}
	if start >= 0 {
		f(start, len(s))
	}
}

// Character kinds for forWords.
const (
	kindNone uint8 = iota
	kindLower
	kindUpper
	kindDigit
)

var asciiKind = func() (t [utf8.RuneSelf]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = kindLower
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = kindUpper
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = kindDigit
	}
	return t
}()

func isDigits(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < '0' || w[i] > '9' {
			return false
		}
	}
	return w != ""
}

// lowerASCII appends w in lower case to dst; ok is false when w is not
// ASCII (no rule word is).
func lowerASCII(dst []byte, w string) (_ []byte, ok bool) {
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= utf8.RuneSelf {
			return dst, false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}

// equalFoldASCII reports whether w equals the lower-case ASCII word r,
// ignoring ASCII case.
func equalFoldASCII(w, r string) bool {
	if len(w) != len(r) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != r[i] {
			return false
		}
	}
	return true
}
