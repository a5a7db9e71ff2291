package routesim

import (
	"testing"
	"time"

	si "github.com/self-improving-loop/selfimprove"
)

// The requirements a fault's check combines: every call answered in
// full; each within d; at most n requests to the primary (or the
// fallback) in all; every call a clean error.
func complete(t *testing.T, f faultFigures) {
	t.Helper()
	if f.complete != f.calls {
		t.Errorf("%d of %d calls answered in full (%s); want all", f.complete, f.calls, f.outcome())
	}
}

func within(d time.Duration) func(*testing.T, faultFigures) {
	return func(t *testing.T, f faultFigures) {
		t.Helper()
		if f.slowest > d {
			t.Errorf("the slowest answer came after %v, want within %v", f.slowest, d)
		}
	}
}

func primaryAtMost(n int) func(*testing.T, faultFigures) {
	return func(t *testing.T, f faultFigures) {
		t.Helper()
		if f.primary > n {
			t.Errorf("%d requests to the primary, want at most %d", f.primary, n)
		}
	}
}

func fallbackAtMost(n int) func(*testing.T, faultFigures) {
	return func(t *testing.T, f faultFigures) {
		t.Helper()
		if f.fallback > n {
			t.Errorf("%d requests to the fallback, want at most %d", f.fallback, n)
		}
	}
}

func cleanError(t *testing.T, f faultFigures) {
	t.Helper()
	if f.failed != f.calls {
		t.Errorf("%s; want a clean error", f.outcome())
	}
}

// checks checks each of cs.
func checks(cs ...func(*testing.T, faultFigures)) func(*testing.T, faultFigures) {
	return func(t *testing.T, f faultFigures) {
		t.Helper()
		for _, c := range cs {
			c(t, f)
		}
	}
}

// stalled is a stream whose first token comes after d.
func stalled(d time.Duration) answer {
	return answer{kind: OK, latency: 300 * time.Millisecond, stream: &shape{first: d}}
}

// faults is the suite, in the order of issue 40's list.
func faults() []fault {
	lat := 300 * time.Millisecond
	primaryOnce := func(bad answer) func(string, string) script {
		return func(primary, fallback string) script { return once(primary, bad)(primary, fallback) }
	}
	return []fault{
		{name: "429 with retry-after 2 s, once", script: primaryOnce(answer{kind: RateLimited, latency: lat}), check: checks(complete, within(3*time.Second), fallbackAtMost(0))},
		{name: "429 without retry-after, persistent", script: always(answer{kind: RateLimitedNoWait, latency: lat}), check: checks(complete, within(3*time.Second))},
		{name: "500 once", script: primaryOnce(answer{kind: ServerError, latency: lat}), check: checks(complete, fallbackAtMost(0))},
		{name: "503 persistent", script: always(answer{kind: Overloaded, latency: lat}), check: checks(complete, within(3*time.Second))},
		{name: "connection reset before headers, once", script: primaryOnce(answer{reset: true}), check: checks(complete, fallbackAtMost(0))},
		{name: "no response at all, 10 s timeout", script: always(fine(time.Hour)), check: checks(complete, primaryAtMost(1), within(15*time.Second))},
		{name: "context length exceeded", script: always(answer{kind: ContextLength, latency: lat}), check: checks(complete, primaryAtMost(1))},
		{name: "content filter", script: always(answer{kind: ContentFilter, latency: lat}), check: checks(cleanError, primaryAtMost(1), fallbackAtMost(0))},
		{name: "primary 503, a prefill the fallback rejects", needs: &si.Needs{Prefill: true},
			limits: map[string]si.RouteLimits{"$fallback": {NoPrefill: true}},
			script: func(primary, fallback string) script {
				return func(m string, _ time.Time) answer {
					if m == primary {
						return answer{kind: Overloaded, latency: lat}
					}
					return answer{kind: PrefillRefused, latency: lat}
				}
			}, check: checks(cleanError, fallbackAtMost(0))},
		{name: "stream: first token after 20 s", stream: true, script: always(stalled(20 * time.Second)), check: checks(complete, primaryAtMost(1), within(15*time.Second))},
		{name: "stream: cut mid-answer", stream: true, script: always(answer{kind: OK, latency: lat, stream: &shape{first: tokenGap, tokens: 20, end: endCut}}), check: complete},
		{name: "stream: stalls after 20 tokens", stream: true, script: always(answer{kind: OK, latency: lat, stream: &shape{first: tokenGap, tokens: 20, end: endHang}}), check: checks(complete, primaryAtMost(1), within(45*time.Second))},
		{name: "stream: a malformed chunk", stream: true, script: always(answer{kind: OK, latency: lat, stream: &shape{first: tokenGap, tokens: 5, malformed: true}}), check: complete},
		{name: "stream: no final event", stream: true, script: always(answer{kind: OK, latency: lat, stream: &shape{first: tokenGap, end: endNoFinal}}), check: checks(complete, primaryAtMost(1), fallbackAtMost(0))},
		{name: "primary down 60 s, then healthy; a request every 4 s", calls: 20, gap: 4 * time.Second,
			script: func(primary, fallback string) script {
				return primaryDown(primary, 0, time.Minute, answer{kind: Overloaded, latency: 50 * time.Millisecond})(simStart)
			}, check: complete},
		{name: "stream: 30 % first-token stall for an hour", stream: true, calls: 900, gap: 4 * time.Second,
			script: func(primary, fallback string) script {
				return func(m string, t time.Time) answer {
					if m == primary && chance(t.Truncate(4*time.Second).String()) < 0.3 { // the same draw for both systems' calls
						return stalled(20 * time.Second)
					}
					return fine(lat)
				}
			}, check: complete},
	}
}
