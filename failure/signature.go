package failure

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxSignature is the length of a signature, in runes.
const MaxSignature = 120

// Signature returns the normalised form of an error message that
// clustering uses: secrets scrubbed (see Scrub), lower case, white space
// collapsed, and variable parts replaced by placeholders: URLs by <url>,
// quoted strings by <str>, file paths (starting with /, ./, ../, ~/ or a
// drive letter) by <path>, UUIDs by <uuid>, runs of 8 or more hex digits
// with at least one digit by <hex>, and numbers (with their decimal
// points) by <n>. It is cut to 120 runes. "timeout after 30s on req 123"
// and "timeout after 45s on req 999" share the signature
// "timeout after <n>s on req <n>". Signature is idempotent.
func Signature(msg string) string {
	var buf [256]byte
	return string(AppendSignature(buf[:0], Scrub(msg)))
}

// ClusterOf is the stable ID of a signature: the FNV-1a hash of its bytes.
func ClusterOf(sig []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range sig {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// ClusterID returns the ID of the cluster of failures whose messages have
// signature sig: 16 hex digits of a 64-bit FNV-1a hash, the same in every
// process.
func ClusterID(sig string) string { return FormatClusterID(ClusterOf([]byte(sig))) }

// ParseClusterID parses a formatted cluster ID.
func ParseClusterID(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("selfimprove: cluster ID %q is not 16 hex digits", s)
	}
	return strconv.ParseUint(s, 16, 64)
}

func FormatClusterID(id uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[id&15]
		id >>= 4
	}
	return string(b[:])
}

// AppendSignature appends the signature of text, which must already be
// scrubbed, to dst.
func AppendSignature(dst []byte, text string) []byte {
	start := len(dst)
	dst = appendSig(dst, text)
	for len(dst) > start && dst[len(dst)-1] == ' ' {
		dst = dst[:len(dst)-1]
	}
	return dst
}

func appendSig(dst []byte, text string) []byte {
	w := sigWriter{dst: dst, start: len(dst)}
	hasURL := strings.Contains(text, "://")
	for i := 0; i < len(text); {
		if n, ok := w.fast(text, i); n > 0 {
			if !ok {
				return w.dst
			}
			i += n
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if unicode.IsSpace(r) {
			w.space = true
			i += size
			continue
		}
		if ph, n := placeholder(text, i, r, hasURL); n > 0 {
			if !w.putStr(ph) {
				return w.dst
			}
			i += n
			continue
		}
		if isLetter(r) {
			r = unicode.ToLower(r)
		}
		if !w.putRune(r) {
			return w.dst
		}
		i += size
	}
	return w.dst
}

// sigWriter appends a signature: it is cut at MaxSignature runes, and
// white space collapses into one pending space, written before the next
// rune.
type sigWriter struct {
	dst          []byte
	start, runes int
	space        bool
}

// pending writes the pending space, if any, and reports whether there is
// room for more.
func (w *sigWriter) pending() bool {
	if w.space {
		w.space = false
		if len(w.dst) > w.start {
			if w.runes >= MaxSignature {
				return false
			}
			w.dst = append(w.dst, ' ')
			w.runes++
		}
	}
	return w.runes < MaxSignature
}

func (w *sigWriter) putByte(c byte) bool {
	if !w.pending() {
		return false
	}
	w.dst = append(w.dst, c)
	w.runes++
	return true
}

func (w *sigWriter) putRune(r rune) bool {
	if !w.pending() {
		return false
	}
	w.dst = utf8.AppendRune(w.dst, r)
	w.runes++
	return true
}

// putStr writes an ASCII placeholder.
func (w *sigWriter) putStr(s string) bool {
	if !w.pending() {
		return false
	}
	n := min(len(s), MaxSignature-w.runes)
	w.dst = append(w.dst, s[:n]...)
	w.runes += n
	return n == len(s)
}

// fast handles the common byte at text[i]: an ASCII letter inside a
// word, white space, or plain punctuation, after an ASCII byte. It
// returns the bytes consumed (0: not such a byte) and whether there was
// room.
func (w *sigWriter) fast(text string, i int) (n int, ok bool) {
	c := text[i]
	if c >= utf8.RuneSelf || i == 0 || text[i-1] >= utf8.RuneSelf {
		return 0, true
	}
	switch k := sigByte[c]; {
	case k == sigSpace:
		w.space = true
		return 1, true
	case k == sigLetter && wordByte[text[i-1]]:
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return 1, w.putByte(c)
	case k == sigPunct:
		return 1, w.putByte(c)
	}
	return 0, true
}

// placeholder returns the placeholder that replaces what starts at
// text[i] (whose first rune is r), and the bytes it replaces: a URL, a
// path, a quoted string, a UUID, a hex word or a number; 0 for none.
func placeholder(text string, i int, r rune, hasURL bool) (string, int) {
	atStart := i == 0 || !isWordByte(text, i)
	switch {
	case atStart && hasURL && isLetter(r):
		if n := urlLen(text[i:]); n > 0 {
			return "<url>", n
		}
	case atStart && (r == '/' || r == '.' || r == '~' || r == '\\'):
		if n := pathLen(text[i:]); n > 0 {
			return "<path>", n
		}
	case r == '"' || r == '`' || (r == '\'' && atStart):
		if j := strings.IndexByte(text[i+1:], byte(r)); j >= 0 {
			return "<str>", j + 2
		}
	}
	if atStart && isDriveLetter(text[i:]) {
		if n := pathLen(text[i:]); n > 0 {
			return "<path>", n
		}
	}
	if atStart && r < utf8.RuneSelf && isHex(byte(r)) {
		if ph, n := hexWord(text, i); n > 0 {
			return ph, n
		}
	}
	if isDigit(r) {
		return "<n>", numberLen(text, i)
	}
	return "", 0
}

// hexWord returns the placeholder of a hex word at text[i]: 8 or more
// hex digits with a decimal digit among them, or 0x and hex digits
// (<hex>); or a UUID (<uuid>); and its length, 0 for none.
func hexWord(text string, i int) (string, int) {
	h, digit := i, false
	for h < len(text) && isHex(text[h]) {
		digit = digit || text[h] <= '9'
		h++
	}
	hexStart := i
	if h == i+1 && text[i] == '0' && h < len(text) && text[h]|0x20 == 'x' {
		hexStart = h + 1
		for h = hexStart; h < len(text) && isHex(text[h]); h++ {
		}
	}
	switch {
	case h-i == 8 && isUUID(text[i:]):
		return "<uuid>", 36
	case endsWord(text, h) && (hexStart == i && h-i >= 8 && digit || hexStart > i && h > hexStart):
		return "<hex>", h - i
	}
	return "", 0
}

// numberLen returns the length of the number at text[i], with its
// decimal points.
func numberLen(text string, i int) int {
	j := i
	for j < len(text) {
		r, n := utf8.DecodeRuneInString(text[j:])
		if isDigit(r) {
			j += n
			continue
		}
		if (r == '.' || r == ',') && j+1 < len(text) && isDigitByteAt(text, j+1) {
			j++
			continue
		}
		break
	}
	return j - i
}

// ASCII byte kinds for appendSig's fast path: sigPunct bytes start
// nothing (no quote, path or placeholder begins with them) and are kept
// as they are.
const (
	sigSpecial = iota
	sigSpace
	sigLetter
	sigPunct
)

var sigByte = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			t[c] = sigSpace
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			t[c] = sigLetter
		case '0' <= c && c <= '9', c == '"', c == '\'', c == '`', c == '/', c == '.', c == '~', c == '\\', c == '<', c == '>', c == '_':
			t[c] = sigSpecial
		default:
			t[c] = sigPunct
		}
	}
	return t
}()

// wordByte marks the ASCII bytes isWordByte counts.
var wordByte = func() (t [utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		t[c] = isAlnumByte(byte(c)) || c == '>'
	}
	return t
}()

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

func isDigit(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsDigit(r)
}

func isDigitByteAt(s string, i int) bool {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isDigit(r)
}

// isWordByte reports whether the rune before position i of s is a letter,
// digit, underscore or '>'. The '>' ends a placeholder, which stands for
// a word: counting it keeps Signature idempotent.
func isWordByte(s string, i int) bool {
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return r == '_' || r == '>' || isLetter(r) || isDigit(r)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// endsWord reports whether no letter or digit starts at position i of s.
func endsWord(s string, i int) bool {
	if i >= len(s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return !isLetter(r) && !isDigit(r)
}

// isUUID reports whether s starts with a UUID not followed by a letter or
// digit.
func isUUID(s string) bool {
	if len(s) < 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	if len(s) == 36 {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[36:])
	return r != '_' && !isLetter(r) && !isDigit(r)
}

func isAlnumByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
}

// urlLen returns the length of the URL s starts with (scheme "://" and
// everything up to white space or a quote), or 0.
func urlLen(s string) int {
	i := 0
	for i < len(s) && i < 16 && (isAlnumByte(s[i]) && s[i] != '_' || i > 0 && (s[i] == '+' || s[i] == '-' || s[i] == '.')) {
		i++
	}
	if i == 0 || !strings.HasPrefix(s[i:], "://") {
		return 0
	}
	return i + 3 + tokenLen(s[i+3:])
}

// pathLen returns the length of the file path s starts with, or 0: "/x",
// "./x", "../x", "~/x", `\x` or "C:\x", up to white space or a quote.
func pathLen(s string) int {
	var rest int
	switch {
	case strings.HasPrefix(s, "../"), strings.HasPrefix(s, `..\`):
		rest = 3
	case strings.HasPrefix(s, "./"), strings.HasPrefix(s, `.\`), strings.HasPrefix(s, "~/"):
		rest = 2
	case isDriveLetter(s):
		rest = 3
	case len(s) > 0 && (s[0] == '/' || s[0] == '\\'):
		rest = 1
	default:
		return 0
	}
	n := tokenLen(s[rest:])
	if n == 0 || !isAlnumByte(s[rest]) && s[rest] != '.' && s[rest] < utf8.RuneSelf {
		return 0
	}
	return rest + n
}

func isDriveLetter(s string) bool {
	return len(s) >= 3 && ('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') && s[1] == ':' && (s[2] == '\\' || s[2] == '/')
}

// tokenLen returns the length of the run at the start of s that has no
// white space, quote or closing bracket.
func tokenLen(s string) int {
	for i, r := range s {
		switch {
		case unicode.IsSpace(r), r == '"', r == '\'', r == '`', r == ')', r == ']', r == '}', r == '>', r == '<', r == ',':
			return i
		}
	}
	return len(s)
}

// SignatureWords calls f for each word of a signature: runs of letters, digits,
// '_', '<' and '>' (so that placeholders such as <n> are words), lower
// case, of 2 bytes or more.
func SignatureWords(sig string, f func(string)) {
	start := -1
	for i, r := range sig + " " {
		word := r == '_' || r == '<' || r == '>' || unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			if i-start >= 2 {
				f(strings.ToLower(sig[start:i]))
			}
			start = -1
		}
	}
}
