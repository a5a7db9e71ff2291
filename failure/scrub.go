package failure

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redacted replaces a secret that Scrub removes.
const Redacted = "<redacted>"

// Scrub returns msg with the secrets it recognises replaced by
// "<redacted>". The loop scrubs every error text before it keeps, stores,
// logs or sends it. Scrub recognises:
//
//   - API keys by their prefix: sk-, sk_, pk_, rk_, xoxb-, xoxp-, xoxa-,
//     xoxs-, ghp_, gho_, ghu_, ghs_, github_pat_, glpat-, hf_ (followed by
//     16 or more key characters; the prefix is kept), AWS access key
//     IDs (AKIA or ASIA and 16 capitals or digits), and AWS secret access
//     keys (40 characters of [A-Za-z0-9+/] with a '/' or '+' that mix
//     upper case, lower case and digits, not within a path; one that
//     starts with '/' holds at most four);
//   - JSON web tokens whole, without "Bearer" before them: a header
//     starting "eyJ" of 16 or more characters and one to four more parts
//     after dots;
//   - the credentials after "Bearer ", "Basic " and "Token ";
//   - the value after a key that names a secret (one containing password,
//     passwd, pwd, secret, token, apikey, api_key, api-key, access_key,
//     private_key, credential, session, authorization or
//     subscription-key (Ocp-Apim-Subscription-Key), or that is auth
//     or ends in _auth or -auth, but not one whose last word names a
//     quantity or a kind: timeout, count, limit, type, ttl, length, size,
//     as in first_token_timeout: 3), as in password=hunter2,
//     password = hunter2, "api_key": "abc" or Authorization: xyz, and
//     the value of a URL's query parameter key, sig or one ending in
//     signature (?key=abc&X-Amz-Signature=def); the key is kept, and the
//     last word of a path is no key (/root/.aws/credentials: x is kept);
//   - the user information of a URL, up to its last '@'
//     (https://user:p@ss@host), also past a '/' in the password when what
//     comes before that '/' is user:password with no port
//     (redis://user:pa/ss@host);
//   - the path of a webhook URL, which is its credential, after
//     hooks.slack.com/services/ (/workflows/, /triggers/),
//     discord.com/api/webhooks/ (discordapp.com, /api/v10/webhooks/) and
//     <tenant>.webhook.office.com/webhookb2/, and on any host the
//     26-character ID after /hooks/ (Mattermost);
//   - runs of 32 or more hex digits;
//   - runs of 32 or more key characters ([A-Za-z0-9_+=-]) that mix upper
//     case, lower case and digits (tokens, JWT parts, base64 secrets); of
//     a run key=value, only the value when the key alone is none.
//
// It returns msg itself, without allocating, when there is nothing to
// remove.
func Scrub(msg string) string {
	var b *strings.Builder
	last := 0 // msg[last:] is not yet copied
	for i := 0; i < len(msg); {
		lo, hi := nextSecret(msg, i)
		if lo < 0 {
			break
		}
		if b == nil {
			b = new(strings.Builder)
			b.Grow(len(msg))
		}
		b.WriteString(msg[last:lo])
		b.WriteString(Redacted)
		last, i = hi, hi
	}
	if b == nil {
		return msg
	}
	b.WriteString(msg[last:])
	return b.String()
}

// keyPrefixes are the prefixes of API keys that Scrub keeps.
var keyPrefixes = []string{
	"sk-", "sk_", "pk_", "rk_", "xoxb-", "xoxp-", "xoxa-", "xoxs-",
	"ghp_", "gho_", "ghu_", "ghs_", "github_pat_", "glpat-", "hf_",
}

// secretKeys are the words that make a key's value secret.
var secretKeys = []string{
	"password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "api-key",
	"access_key", "accesskey", "private_key", "credential", "session", "authorization",
}

func isKeyByte(c byte) bool { return keyByte[c] }

// keyByte marks the bytes of keys and tokens: letters, digits, _ - + =.
var keyByte = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = isAlnumByte(byte(c)) || c == '-' || c == '+' || c == '='
	}
	return t
}()

// nextSecret returns the bounds of the first secret in s at or after from,
// or -1, -1.
func nextSecret(s string, from int) (lo, hi int) {
	for i := from; i < len(s); {
		c := s[i]
		if keyByte[c] {
			// A run of key bytes: a token, and any '=' inside it.
			end := i + 1
			for end < len(s) && keyByte[s[end]] {
				end++
			}
			if i == 0 || !keyByte[s[i-1]] && !afterWordPlaceholder(s, i) {
				if c == 'e' {
					if lo, hi := jwtSecret(s, i); lo >= 0 {
						return lo, hi
					}
				}
				if lo, hi := awsSecret(s, i); lo >= 0 {
					return lo, hi
				}
				if lo, hi := tokenSecret(s, i, end); lo >= 0 {
					return lo, hi
				}
			}
			for k := i; k < end; k++ {
				if s[k] == '=' {
					if lo, hi := keyValueSecret(s, k); lo >= 0 {
						return lo, hi
					}
					if lo, hi := jwtSecret(s, k+1); lo >= 0 {
						return lo, hi
					}
					if lo, hi := awsSecret(s, k+1); lo >= 0 {
						return lo, hi
					}
				}
			}
			i = end
			continue
		}
		size := 1
		switch c {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			if lo, hi := schemeSecret(s, i); lo >= 0 {
				return lo, hi
			}
		case '/':
			if i == 0 || beforeSlashKey[s[i-1]] {
				if lo, hi := awsSecret(s, i); lo >= 0 {
					return lo, hi
				}
			}
			if lo, hi := webhookSecret(s, i); lo >= 0 {
				return lo, hi
			}
		case ':':
			if lo, hi := keyValueSecret(s, i); lo >= 0 {
				return lo, hi
			}
			if strings.HasPrefix(s[i:], "://") {
				if lo, hi := userinfoSecret(s, i+3); lo >= 0 {
					return lo, hi
				}
			}
		default:
			if c >= utf8.RuneSelf {
				var r rune
				r, size = utf8.DecodeRuneInString(s[i:])
				if unicode.IsSpace(r) {
					if lo, hi := schemeSecret(s, i); lo >= 0 {
						return lo, hi
					}
				}
			}
		}
		i += size
	}
	return -1, -1
}

// afterWordPlaceholder reports whether s[:i] ends with a placeholder that
// Signature puts in place of letters and digits (<n>, <hex>, <uuid>): what
// follows continues that word, as it did before Signature replaced it.
func afterWordPlaceholder(s string, i int) bool {
	if s[i-1] != '>' {
		return false
	}
	p := s[:i]
	return strings.HasSuffix(p, "<n>") || strings.HasSuffix(p, "<hex>") || strings.HasSuffix(p, "<uuid>")
}

// tokenSecret looks at the run of key characters s[i:j]. When the run is
// a key=value pair whose value alone is a secret, and whose key is not,
// only the value is a secret: the key's name stays readable.
func tokenSecret(s string, i, j int) (lo, hi int) {
	lo, hi = runSecret(s, i, j)
	if lo != i || hi != j {
		return lo, hi
	}
	p := strings.IndexByte(s[i:j], '=')
	if p <= 0 {
		return lo, hi
	}
	q := i + p
	for q < j && s[q] == '=' {
		q++
	}
	if q == j {
		return lo, hi // base64 padding
	}
	if vlo, vhi := keyValueSecret(s, i+p); vlo >= 0 {
		return vlo, vhi // the key names a secret: its name stays
	}
	if k, _ := runSecret(s, i, i+p); k >= 0 {
		return lo, hi
	}
	if vlo, vhi := runSecret(s, q, j); vlo >= 0 {
		if jlo, jhi := jwtSecret(s, q); jlo >= 0 {
			return jlo, jhi
		}
		return vlo, vhi
	}
	return lo, hi
}

// runSecret looks at the run of key characters s[i:j] as one token.
func runSecret(s string, i, j int) (lo, hi int) {
	w := s[i:j]
	if len(w) < 19 { // the shortest key: a 3-byte prefix and 16 more
		return -1, -1
	}
	switch w[0] | 0x20 {
	case 's', 'p', 'r', 'x', 'g', 'h':
		for _, p := range keyPrefixes {
			if len(w) >= len(p)+16 && strings.EqualFold(w[:len(p)], p) {
				return i + len(p), j
			}
		}
	}
	if len(w) == 20 && (strings.HasPrefix(w, "AKIA") || strings.HasPrefix(w, "ASIA")) {
		upper := true
		for k := 4; k < 20; k++ {
			upper = upper && ('A' <= w[k] && w[k] <= 'Z' || '0' <= w[k] && w[k] <= '9')
		}
		if upper {
			return i, j
		}
	}
	if len(w) < 32 || agentFileName(s, i, j) {
		return -1, -1
	}
	// A long run of hex digits, or a long token that mixes cases and
	// digits. Only the alphanumeric part counts for hex.
	hexRun, up, low, dig := 0, false, false, false
	for k := 0; k < len(w); k++ {
		c := w[k]
		if isHex(c) {
			hexRun++
			if hexRun >= 32 {
				return i, j
			}
		} else {
			hexRun = 0
		}
		up = up || 'A' <= c && c <= 'Z'
		low = low || 'a' <= c && c <= 'z'
		dig = dig || '0' <= c && c <= '9'
	}
	if up && low && dig {
		return i, j
	}
	return -1, -1
}

// agentFileName reports whether s[i:j] names an agent's state file in a
// path (the root's fileName: up to 40 bytes of [a-z0-9_-], "_", 32
// lower-case hex digits, then ".json"), which an operator needs to read.
func agentFileName(s string, i, j int) bool {
	w := s[i:j]
	if i == 0 || s[i-1] != '/' || !strings.HasPrefix(s[j:], ".json") || len(w) > 40+33 || w[len(w)-33] != '_' {
		return false
	}
	for k := 0; k < len(w); k++ {
		c := w[k]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') || k > len(w)-33 && !isHex(c) {
			return false
		}
	}
	return true
}

// awsSecret returns the bounds of an AWS secret access key starting at i:
// 40 characters of base64 ([A-Za-z0-9+/]) that hold a '/' or a '+' and
// mix upper case, lower case and digits, standing alone (not part of a
// path: no '/' or '.' before it, no file extension after it). A key that
// starts with a '/' holds at most 4 (a path of 40 characters holds more);
// the caller sees that it follows a byte of beforeSlashKey.
func awsSecret(s string, i int) (lo, hi int) {
	const n = 40
	if len(s)-i < n || i > 0 && (s[i-1] == '/' || s[i-1] == '.') {
		return -1, -1
	}
	up, low, dig, sep := false, false, false, false
	for k := i; k < i+n; k++ {
		switch c := s[k]; {
		case 'A' <= c && c <= 'Z':
			up = true
		case 'a' <= c && c <= 'z':
			low = true
		case '0' <= c && c <= '9':
			dig = true
		case c == '/' || c == '+':
			sep = true
		default:
			return -1, -1
		}
	}
	j := i + n
	if !(up && low && dig && sep) || j < len(s) && (keyByte[s[j]] || s[j] == '/' ||
		s[j] == '.' && j+1 < len(s) && isAlnumByte(s[j+1])) {
		return -1, -1
	}
	if s[i] == '/' && strings.Count(s[i:j], "/") > 4 {
		return -1, -1 // a path of 40 characters
	}
	return i, j
}

// beforeSlashKey marks the bytes after which an AWS secret key may start
// with a '/': white space, quotes, opening brackets, a comma, an '='.
var beforeSlashKey = func() (t [256]bool) {
	for _, c := range []byte(" \t\n\r\v\f\"'`([{,=") {
		t[c] = true
	}
	return t
}()

// jwtSecret returns the bounds of a JSON web token starting at i: a
// header of 16 or more base64url characters starting with "eyJ" (the
// encoding of `{"`), and one to four more parts after dots (a JWS has
// three, a JWE five; a part may be empty, as an unsigned JWS's signature).
// A dot that ends the token is kept: it may end a sentence.
func jwtSecret(s string, i int) (lo, hi int) {
	if len(s)-i < 16 || s[i] != 'e' || s[i+1] != 'y' || s[i+2] != 'J' {
		return -1, -1
	}
	j := i + 3
	for j < len(s) && keyByte[s[j]] {
		j++
	}
	if j-i < 16 {
		return -1, -1
	}
	parts := 1
	for parts < 5 && j < len(s) && s[j] == '.' {
		k := j + 1
		for k < len(s) && keyByte[s[k]] {
			k++
		}
		if k == j+1 && (k == len(s) || s[k] != '.') {
			break
		}
		parts, j = parts+1, k
	}
	if parts < 2 {
		return -1, -1
	}
	return i, j
}

// schemeSecret looks for "Bearer x", "Basic x" or "Token x" whose word
// ends at the white space at i, and returns the bounds of x.
func schemeSecret(s string, i int) (lo, hi int) {
	k := i
	for k > 0 && i-k <= 6 && isAlnumByte(s[k-1]) {
		k--
	}
	if i-k < 5 || i-k > 6 || k > 0 && (isKeyByte(s[k-1]) || afterWordPlaceholder(s, k)) {
		return -1, -1
	}
	switch w := s[k:i]; {
	case strings.EqualFold(w, "bearer"), strings.EqualFold(w, "basic"), strings.EqualFold(w, "token"):
	default:
		return -1, -1
	}
	// The credentials start after the white space, which may be a run of
	// any kind (Signature collapses it to one space).
	lo = i
	for lo < len(s) {
		r, n := utf8.DecodeRuneInString(s[lo:])
		if !unicode.IsSpace(r) {
			break
		}
		lo += n
	}
	j := lo
	for j < len(s) && (isKeyByte(s[j]) || s[j] == '.' || s[j] == '/' || s[j] == '~') {
		j++
	}
	if j-lo < 8 || strings.HasPrefix(s[lo:], Redacted) {
		return -1, -1
	}
	return lo, j
}

// keyValueSecret looks for a secret key ending before the separator at i
// (allowing a closing quote) and returns the bounds of its value.
func keyValueSecret(s string, i int) (lo, hi int) {
	k := i
	if s[i] == '=' {
		if i+1 < len(s) && s[i+1] == '=' {
			return -1, -1 // a comparison, as in password == nil
		}
		for k > 0 && (s[k-1] == ' ' || s[k-1] == '\t') {
			k-- // key = value, as in a credentials file
		}
	}
	if k > 0 && (s[k-1] == '"' || s[k-1] == '\'') {
		k--
	}
	e := k
	for k > 0 && (isAlnumByte(s[k-1]) || s[k-1] == '-' || s[k-1] == '.') {
		k--
	}
	if k > 0 && s[k-1] == '/' {
		return -1, -1 // the end of a path, as in open /root/.aws/credentials: …
	}
	query := s[i] == '=' && k > 0 && (s[k-1] == '?' || s[k-1] == '&')
	if !secretKey(s[k:e]) && !(query && queryKey(s[k:e])) {
		return -1, -1
	}
	j := i + 1
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsSpace(r) {
			break
		}
		j += n
	}
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		q := s[j]
		end := strings.IndexByte(s[j+1:], q)
		if end <= 0 {
			return -1, -1
		}
		if s[j+1:j+1+end] == Redacted {
			return -1, -1
		}
		return j + 1, j + 1 + end
	}
	v := j
	for v < len(s) {
		r, n := utf8.DecodeRuneInString(s[v:])
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '&' || r == ',' || r == ';' || r == ')' || r == '}' || r == ']' || r == '"' || r == '\'' || r == '<' {
			break
		}
		v += n
	}
	if v == j || strings.EqualFold(s[j:v], "bearer") || strings.EqualFold(s[j:v], "basic") || strings.EqualFold(s[j:v], "token") {
		return -1, -1
	}
	return j, v
}

// secretKey reports whether the key k names a secret.
func secretKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	var buf [64]byte
	lk, _ := lowerASCII(buf[:0], k)
	last := lk[bytes.LastIndexAny(lk, "_-.")+1:]
	switch {
	case bytes.HasSuffix(lk, []byte("tokens")):
		return false // a count, as in max_tokens=4096
	case quantityWord(last):
		return false // a quantity, as in first_token_timeout: 3, token_type: bearer
	case string(lk) == "auth", bytes.HasSuffix(lk, []byte("_auth")), bytes.HasSuffix(lk, []byte("-auth")):
		return true
	case len(lk) >= 15 && lk[len(lk)-1] == 'y' && subscriptionKey(lk):
		return true // Azure's Ocp-Apim-Subscription-Key
	}
	for i := range lk {
		switch lk[i] {
		case 'p', 's', 't', 'a', 'c':
			for _, w := range secretKeys {
				if w[0] == lk[i] && bytes.HasPrefix(lk[i:], []byte(w)) {
					return true
				}
			}
		}
	}
	return false
}

// subscriptionKey reports whether lk, a key in lower case, ends in
// subscription-key, subscription_key or subscriptionkey: Azure's API
// Management key (Ocp-Apim-Subscription-Key).
func subscriptionKey(lk []byte) bool {
	n := len(lk)
	if n < 15 || lk[n-1] != 'y' || lk[n-2] != 'e' || lk[n-3] != 'k' {
		return false
	}
	p := lk[:n-3]
	if c := p[len(p)-1]; c == '-' || c == '_' || c == '.' {
		p = p[:len(p)-1]
	}
	return bytes.HasSuffix(p, []byte("subscription"))
}

// queryKey reports whether k, a URL query parameter, carries a secret:
// key (an API key), sig or a name ending in signature (a signed URL's
// signature, as in X-Amz-Signature).
func queryKey(k string) bool {
	const sig = "signature"
	return strings.EqualFold(k, "key") || strings.EqualFold(k, "sig") ||
		len(k) >= len(sig) && strings.EqualFold(k[len(k)-len(sig):], sig)
}

// quantityWord reports whether w, the last word of a key, names a
// quantity or a kind rather than a secret: the key's value is then no
// secret, whatever words come before it.
func quantityWord(w []byte) bool {
	switch string(w) {
	case "timeout", "timeouts", "count", "limit", "type", "ttl", "length", "size":
		return true
	}
	return false
}

// userinfoSecret returns the bounds of the user information of the URL
// whose authority starts at i, if it has any: up to the authority's last
// '@', as a URL parser reads it (a password may hold an '@'). A password
// may also hold an unescaped '/': when what comes before the first '/'
// is user:password with no '@' (what follows its last ':' is no port),
// the '@' may come after that '/'.
func userinfoSecret(s string, i int) (lo, hi int) {
	at, colon, slashed := -1, -1, false
scan:
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '@':
			at = j
		case ':':
			if !slashed {
				colon = j
			}
		case ']':
			if !slashed {
				colon = -1 // an IPv6 address's colons
			}
		case '/':
			if at >= 0 || !slashed && (colon < 0 || isPort(s[colon+1:j])) {
				break scan
			}
			slashed = true
		case '?', '#', ' ', '"', '\'', '\n', '\t', '<', '>':
			break scan
		}
	}
	if at <= i || s[i:at] == Redacted {
		return -1, -1
	}
	return i, at
}

// isPort reports whether p is a port: one or more digits.
func isPort(p string) bool {
	for k := 0; k < len(p); k++ {
		if p[k] < '0' || p[k] > '9' {
			return false
		}
	}
	return p != ""
}
