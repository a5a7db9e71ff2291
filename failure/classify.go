package failure

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Class is the kind of a failure, as Classify finds it. It is a string so
// that an error can name a class of its own (see Classify).
type Class string

// The classes Classify knows.
const (
	ClassRateLimit        Class = "rate_limit"        // 429, quota, throttling
	ClassTimeout          Class = "timeout"           // deadline exceeded, timed out, 408
	ClassOverloaded       Class = "overloaded"        // 5xx, overloaded, unavailable
	ClassNetwork          Class = "network"           // refused, reset, DNS, EOF
	ClassAuth             Class = "auth"              // 401, 403, invalid key
	ClassBadRequest       Class = "bad_request"       // 400, 422, schema, validation
	ClassNotFound         Class = "not_found"         // 404, no such thing
	ClassModelUnavailable Class = "model_unavailable" // model not found, deprecated, withdrawn
	ClassContextLength    Class = "context_length"    // too many tokens, context window exceeded
	ClassEmptyResponse    Class = "empty_response"    // nothing came back
	ClassContentFilter    Class = "content_filter"    // refusal, safety, moderation
	ClassToolError        Class = "tool_error"        // a tool or function call failed
	ClassPanic            Class = "panic"             // the wrapped function panicked
	ClassCanceled         Class = "canceled"          // context canceled
	ClassOther            Class = "other"             // none of the above
)

// RootCause is a failure's root cause: what part of the agent's work went
// wrong.
type RootCause string

// The root causes. Classify's classes map onto the first five (see
// Class.RootCause); RootCauseOverconfidence (an answer given with
// unwarranted certainty) needs a judge of the output, so no built-in class
// maps to it.
const (
	RootCauseToolFailure          RootCause = "tool_failure"          // an API, tool or network the agent uses failed
	RootCauseContextLoss          RootCause = "context_loss"          // the agent lost or overflowed its context
	RootCauseKnowledgeGap         RootCause = "knowledge_gap"         // the agent asked for what does not exist
	RootCauseInstructionAmbiguity RootCause = "instruction_ambiguity" // the agent's request or prompt was not acceptable
	RootCauseReasoningError       RootCause = "reasoning_error"       // the agent's own logic failed
	RootCauseOverconfidence       RootCause = "overconfidence"        // an answer given with unwarranted certainty
)

// RootCause maps c onto REFLEX's taxonomy: failures of an API, a tool or
// the network are tool_failure; context_length is context_loss; not_found
// is knowledge_gap; bad_request and content_filter are
// instruction_ambiguity; empty_response, panic, other and any class
// Classify does not know are reasoning_error.
func (c Class) RootCause() RootCause {
	switch c {
	case ClassRateLimit, ClassTimeout, ClassOverloaded, ClassNetwork, ClassAuth,
		ClassModelUnavailable, ClassToolError, ClassCanceled, ClassQuota:
		return RootCauseToolFailure
	case ClassContextLength:
		return RootCauseContextLoss
	case ClassNotFound:
		return RootCauseKnowledgeGap
	case ClassBadRequest, ClassContentFilter:
		return RootCauseInstructionAmbiguity
	}
	return RootCauseReasoningError
}

// Classify returns the class of err (ClassOther for nil or an error it
// cannot place). It looks at Go's own signals first, through the chain of
// wrapped errors (Unwrap, errors.Join; at most 64 errors, 32 deep, an
// error met again, as in a cycle, not read again):
//
//  1. an error with a method FailureClass() Class names its own class;
//  2. context.Canceled is canceled; context.DeadlineExceeded,
//     os.ErrDeadlineExceeded, a net.Error whose Timeout() is true and
//     ETIMEDOUT are timeout;
//  3. ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE, ENETUNREACH,
//     EHOSTUNREACH, a *net.DNSError, io.EOF and io.ErrUnexpectedEOF are
//     network;
//  4. an error with a method StatusCode() int or HTTPStatusCode() int
//     gives an HTTP status: 429 rate_limit, 408 timeout, 401 and 403 auth,
//     400 and 422 bad_request, 404 not_found, 5xx overloaded.
//
// Then, for an error in the chain with a method RawJSON() string (the
// provider's error body, as openai-go and anthropic-sdk-go keep it), it
// reads the provider's code and type ("model_not_found",
// "context_length_exceeded", "insufficient_quota", "overloaded_error"),
// which name the class outright, else the body's message with the
// error's text, as below (see ProviderErrorOf).
//
// Then it reads the error's text (its first 1 KiB). The text is split
// into words at every character that is not a letter or digit, at
// CamelCase humps and between letters and digits, and compared word by
// word, case-insensitively: "RateLimitError" and "rate_limit_exceeded"
// are rate limits, "request 14290 failed" is not. A three-digit HTTP
// status in the text counts when it opens the message or follows "http",
// "status", "code", "error", "response", "returned", "got" or "received"
// (with only numbers between). Specific phrases (a withdrawn model, an
// exceeded context window, a content filter, a rate limit) override a
// status code, so "400: maximum context length exceeded" is
// context_length; generic ones ("timeout", "refused") give way to it.
func Classify(err error) Class {
	if err == nil {
		return ClassOther
	}
	return classify(err, textN(err, maxClassifyText))
}

// maxClassifyText is how much of an error's text Classify reads.
const maxClassifyText = 1024

// classify is Classify with err's text already read. A panic in one of
// err's methods (Unwrap, Is, Timeout, …) gives ClassOther.
func classify(err error, text string) Class {
	class, status := classifyErr(err, text)
	if class != "" {
		return class
	}
	return classifyText(text, status)
}

// classifyErr is classify's part that reads err's chain: the class when
// the chain decides it, else "" and the HTTP status found in the chain
// (0 for none) for classifyText.
func classifyErr(err error, text string) (class Class, status int) {
	defer func() {
		if recover() != nil {
			class = ClassOther
		}
	}()
	if err != nil {
		var (
			c   Class
			ok  bool
			sc  int
			raw string
		)
		Walk(err, func(e error) bool {
			if x, is := e.(interface{ FailureClass() Class }); is {
				if c, ok = safeClass(x); ok {
					return false
				}
			}
			if sc == 0 {
				sc = statusOf(e)
			}
			if raw == "" {
				raw = rawJSONOf(e)
			}
			return true
		})
		if ok {
			return c, 0
		}
		if c := providerClass(raw, text, sc); c != "" {
			return c, 0
		}
		if c := signalClass(err); c != "" {
			return c, 0
		}
		status = sc
	}
	return "", status
}

// safeClass calls FailureClass, catching a panic.
func safeClass(x interface{ FailureClass() Class }) (c Class, ok bool) {
	defer func() {
		if recover() != nil {
			c, ok = "", false
		}
	}()
	c = x.FailureClass()
	return c, c != ""
}

// statusOf returns the HTTP status e reports through StatusCode() or
// HTTPStatusCode(), or 0.
func statusOf(e error) (code int) {
	defer func() {
		if recover() != nil {
			code = 0
		}
	}()
	switch x := e.(type) {
	case interface{ StatusCode() int }:
		code = x.StatusCode()
	case interface{ HTTPStatusCode() int }:
		code = x.HTTPStatusCode()
	}
	if code < 100 || code > 599 {
		return 0
	}
	return code
}

// signalClass classifies err by the Go errors in its chain, or returns "".
func signalClass(err error) Class {
	var canceled, timeout, network bool
	Walk(err, func(e error) bool {
		switch e {
		case context.Canceled:
			canceled = true
			return false
		case context.DeadlineExceeded, os.ErrDeadlineExceeded:
			timeout = true
			return false
		case io.EOF, io.ErrUnexpectedEOF:
			network = true
		}
		switch x := e.(type) {
		case syscall.Errno:
			switch x {
			case syscall.ETIMEDOUT:
				timeout = true
				return false
			case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
				syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN:
				network = true
			}
		case *net.DNSError:
			if x.IsTimeout {
				timeout = true
				return false
			}
			network = true
		case net.Error:
			if safeTimeout(x) {
				timeout = true
				return false
			}
		}
		// An error that says it is context.Canceled (errors.Is asks it).
		if x, ok := e.(interface{ Is(error) bool }); ok && x.Is(context.Canceled) {
			canceled = true
			return false
		}
		return true
	})
	switch {
	case canceled && !timeout:
		return ClassCanceled
	case timeout:
		return ClassTimeout
	case network:
		return ClassNetwork
	}
	return ""
}

func safeTimeout(e net.Error) (t bool) {
	defer func() {
		if recover() != nil {
			t = false
		}
	}()
	return e.Timeout()
}

// statusClass maps an HTTP status to a class, or "".
func statusClass(code int) Class {
	switch {
	case code == 429:
		return ClassRateLimit
	case code == 408:
		return ClassTimeout
	case code == 401, code == 403:
		return ClassAuth
	case code == 400, code == 422:
		return ClassBadRequest
	case code == 404, code == 410:
		return ClassNotFound
	case code >= 500 && code <= 599:
		return ClassOverloaded
	}
	return ""
}

// A text rule: a phrase of lowercase ASCII words that must appear as
// consecutive words. need, when set, is a word that must also appear
// somewhere in the text. Among the rules that match, the one with the
// highest prio wins; a status code has prio statusPrio.
type textRule struct {
	words []string
	class Class
	prio  int
	need  string
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
			"max tokens exceeded", "context limit", "contextlength", "too long for context", "reduce the length"}},
		{ClassContentFilter, 80, "", []string{
			"content filter", "contentfilter", "content policy", "content management policy", "safety",
			"moderation", "flagged", "refused to", "refusal", "responsible ai", "harmful", "policy violation",
			"blocked by"}},
		{ClassQuota, 76, "", []string{
			"current quota", "insufficient quota", "billing hard limit", "credit balance is too low"}},
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
			rules = append(rules, textRule{words: words, class: g.class, prio: g.prio, need: g.need})
		}
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
			if r.prio <= bestPrio || i+len(r.words) > n {
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
