package failure

import "strings"

// slackHookPaths are the paths of hooks.slack.com whose rest is a secret:
// incoming webhooks and workflow triggers.
var slackHookPaths = []string{"/services/", "/workflows/", "/triggers/"}

// webhookSecret looks at the '/' at i and returns the bounds of the
// secret in a webhook URL whose path starts there: a URL that is itself
// the credential. Of a known service, the rest of the path after its
// prefix goes (the IDs with the token): hooks.slack.com/services/,
// /workflows/ and /triggers/; discord.com or discordapp.com
// /api/webhooks/ (also /api/v10/webhooks/); <tenant>.webhook.office.com
// /webhookb2/ (Microsoft Teams); hooks.zapier.com /hooks/<kind>/ (Zapier:
// /hooks/catch/<account>/<hook>/); maker.ifttt.com /trigger/<event>/with/key/
// and /trigger/<event>/json/with/key/ (IFTTT: the key goes, the event
// stays), and /use/ (the key's own page). On any host, the 26-character ID after /hooks/ goes
// (Mattermost). The query stays: its secrets are keys (key=, token=, sig=)
// that keyValueSecret finds.
func webhookSecret(s string, i int) (lo, hi int) {
	if i+1 >= len(s) {
		return -1, -1
	}
	switch s[i+1] {
	case 'h':
		if lo, hi = mattermostHook(s, i); lo >= 0 || !strings.HasPrefix(s[i:], "/hooks/") {
			return lo, hi
		}
	case 's', 't', 'w', 'a', 'u':
	default:
		return -1, -1
	}
	p := webhookPrefix(urlHost(s, i), s[i:])
	if p < 0 {
		return -1, -1
	}
	lo = i + p
	hi = lo
	for hi < len(s) && (keyByte[s[hi]] || strings.IndexByte("/.~%@", s[hi]) >= 0) {
		hi++
	}
	for hi > lo && s[hi-1] == '.' {
		hi-- // a dot that ends a sentence
	}
	if hi == lo {
		return -1, -1 // nothing there, or <redacted> already
	}
	return lo, hi
}

// webhookPrefix returns the length of the prefix of path after which a
// webhook of host holds its secret, or -1.
func webhookPrefix(host, path string) int {
	switch {
	case hostIs(host, "hooks.slack.com"):
		for _, p := range slackHookPaths {
			if strings.HasPrefix(path, p) {
				return len(p)
			}
		}
	case hostIs(host, "discord.com"), hostIs(host, "discordapp.com"):
		const api, hooks = "/api/", "webhooks/"
		if !strings.HasPrefix(path, api) {
			return -1
		}
		k := len(api)
		if k < len(path) && path[k] == 'v' { // an API version: /api/v10/
			j := k + 1
			for j < len(path) && '0' <= path[j] && path[j] <= '9' {
				j++
			}
			if j > k+1 && j < len(path) && path[j] == '/' {
				k = j + 1
			}
		}
		if strings.HasPrefix(path[k:], hooks) {
			return k + len(hooks)
		}
	case hostIs(host, "webhook.office.com"):
		const teams = "/webhookb2/"
		if strings.HasPrefix(path, teams) {
			return len(teams)
		}
	case hostIs(host, "hooks.zapier.com"):
		return afterSegment(path, "/hooks/", "/")
	case hostIs(host, "maker.ifttt.com"):
		if k := afterSegment(path, "/trigger/", "/json/with/key/"); k >= 0 {
			return k
		}
		if k := afterSegment(path, "/trigger/", "/with/key/"); k >= 0 {
			return k
		}
		if strings.HasPrefix(path, "/use/") { // the key's own page
			return len("/use/")
		}
	}
	return -1
}

// afterSegment returns the length of path's prefix made of before, one
// segment (a name of URL bytes, not empty) and after, or -1.
func afterSegment(path, before, after string) int {
	if !strings.HasPrefix(path, before) {
		return -1
	}
	k := len(before)
	for k < len(path) && (keyByte[path[k]] || strings.IndexByte(".~%", path[k]) >= 0) {
		k++
	}
	if k == len(before) || !strings.HasPrefix(path[k:], after) {
		return -1
	}
	return k + len(after)
}

// urlHost returns the host name that ends at i, before a URL's path,
// without its port: the letters, digits, dots and hyphens before i.
func urlHost(s string, i int) string {
	k := i
	for k > 0 && (isAlnumByte(s[k-1]) || s[k-1] == '.' || s[k-1] == '-' || s[k-1] == ':') {
		k--
	}
	h := s[k:i]
	if c := strings.LastIndexByte(h, ':'); c >= 0 && isPort(h[c+1:]) {
		h = h[:c]
	}
	return h
}

// hostIs reports whether host is domain or one of its subdomains,
// whatever the case.
func hostIs(host, domain string) bool {
	n := len(host) - len(domain)
	return n >= 0 && strings.EqualFold(host[n:], domain) && (n == 0 || host[n-1] == '.')
}

// mattermostHook returns the bounds of a Mattermost webhook's ID after the
// "/hooks/" at i: 26 lower-case letters and digits, the whole segment.
func mattermostHook(s string, i int) (lo, hi int) {
	const prefix, n = "/hooks/", 26
	lo = i + len(prefix)
	if len(s)-lo < n || !strings.HasPrefix(s[i:], prefix) {
		return -1, -1
	}
	for k := lo; k < lo+n; k++ {
		if c := s[k]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return -1, -1
		}
	}
	if hi = lo + n; hi < len(s) && keyByte[s[hi]] {
		return -1, -1
	}
	return lo, hi
}
