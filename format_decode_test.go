package selfimprove

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// setJSON returns the JSON document data with the value at path set to v;
// path is a field path as the decoder's errors name it, such as
// "calls.window.buckets[0].calls".
func setJSON(t *testing.T, data []byte, path string, v any) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var steps []any
	for _, part := range strings.Split(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		steps = append(steps, name)
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			if err != nil {
				t.Fatalf("path %q: %v", path, err)
			}
			steps = append(steps, n)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	cur := doc
	for i, s := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			k := s.(string)
			if last {
				c[k] = v
			} else if cur = c[k]; cur == nil {
				t.Fatalf("path %q: no %q", path, k)
			}
		case []any:
			n := s.(int)
			if n >= len(c) {
				t.Fatalf("path %q: no element %d", path, n)
			}
			if last {
				c[n] = v
			} else {
				cur = c[n]
			}
		default:
			t.Fatalf("path %q: %v is not a container", path, cur)
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// extremes are the integers no counter, time or duration may hold.
var extremes = []int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, 1 << 62, -1}

// timeExtremes are times no stored time may be: the ends of int64
// nanoseconds, 2^62 ns after 1970, just before 1970, and the ends of
// RFC 3339.
var timeExtremes = []string{
	"2262-04-11T23:47:16.854775807Z", "1677-09-21T00:12:43.145224192Z", "2116-02-20T23:53:38.427387904Z",
	"1969-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z",
}

// checkRejected decodes data and checks that it is refused with an error
// that contains want, or one of its alternatives separated by "|".
func checkRejected(t *testing.T, data []byte, id, want string) {
	t.Helper()
	_, err := decodeState(data, id)
	if err == nil {
		t.Fatalf("accepted")
	}
	for _, w := range strings.Split(want, "|") {
		if strings.Contains(err.Error(), w) {
			return
		}
	}
	t.Fatalf("error %q does not name %q", err, want)
}

func TestDecodeStateRangeChecksFormat2(t *testing.T) {
	a, b := stateGoldens[0], stateGoldens[1]
	docA, docB := readTestdata(t, a.v2), readTestdata(t, b.v2)
	ints := []string{
		"max_version", "generation", "config.version", "config.max_attempts", "history[0].version",
		"verify.calls", "verify.failures", "verify.latency_ns", "verify.consecutive_failures",
		"control.calls", "control.failures", "control.latency_ns", "control.consecutive_failures",
		"verifying.from.version", "verifying.to.version", "verifying.before.calls", "verifying.window.total_calls",
		"changes[0].from.version", "changes[0].to.version", "changes[0].before.calls", "changes[0].before.failures",
		"changes[0].before.total_latency_ns", "changes[0].before.avg_latency_ns", "changes[0].before.consecutive_failures",
		"changes[0].window.window_ns", "changes[0].window.calls_per_day", "changes[0].window.total_calls",
		"changes[0].window.ignored", "changes[0].control.calls",
		"threshold.failures", "threshold.window", "threshold.cooldown", "rejected[0].config.version",
		"calls.total", "calls.ignored", "calls.consecutive_failures",
		"calls.window.bucket_ns", "calls.window.buckets[0].calls", "calls.window.buckets[0].failures",
		"calls.window.buckets[0].latency_ns", "calls.last_24h.bucket_ns", "calls.last_24h.buckets[0].calls",
		"calls.failures[0].generation", "calls.failures[0].duration_ns", "calls.failures[0].version",
		"calls.failures[15].duration_ns", "calls.latest[0].duration_ns", "calls.latest[15].duration_ns",
		"calls.ring_pos.failures", "calls.ring_pos.failure_details", "calls.ring_pos.latest",
		"clusters[0].total", "clusters[0].window.bucket_ns", "clusters[0].window.buckets[0].failures",
		"proposals[0].count", "proposals[0].config.version",
	}
	for _, field := range ints {
		for _, v := range extremes {
			if v == -1 && strings.HasSuffix(field, "generation") && strings.HasPrefix(field, "calls.") {
				v = 1 << 32 // a kept failure's generation is its low 32 bits
			}
			t.Run(fmt.Sprintf("%s=%d", field, v), func(t *testing.T) {
				// The config's and the threshold's own checks name the
				// field too.
				checkRejected(t, setJSON(t, docA, field, json.Number(strconv.FormatInt(v, 10))), a.id, field)
			})
		}
	}
	times := []string{
		"cooldown_until", "calls.window.newest", "calls.window.buckets[0].start", "calls.last_24h.newest",
		"calls.last_24h.buckets[3].start", "calls.failures[0].end", "calls.failures[15].end", "calls.latest[0].end",
		"clusters[0].first_seen", "clusters[0].last_seen", "clusters[0].window.newest",
		"clusters[0].window.buckets[1].start", "verifying.applied_at", "changes[0].applied_at",
		"changes[0].decided_at", "proposals[0].created", "proposals[0].updated",
	}
	for _, field := range times {
		for _, v := range timeExtremes {
			t.Run(field+"="+v, func(t *testing.T) {
				checkRejected(t, setJSON(t, docA, field, v), a.id, field)
			})
		}
	}
	for _, v := range timeExtremes {
		t.Run("circuit_open_until="+v, func(t *testing.T) {
			checkRejected(t, setJSON(t, docB, "circuit_open_until", v), b.id, "circuit_open_until")
		})
	}
}

func TestDecodeStateRangeChecksFormat1(t *testing.T) {
	a, b := stateGoldens[0], stateGoldens[1]
	docA, docB := readTestdata(t, a.v1), readTestdata(t, b.v1)
	// Each format 1 field, and the name the error gives it: its own for
	// the fields read as they were, its format 2 name for those read into
	// a list.
	fields := []struct{ v1, want string }{
		{"max_version", "max_version"},
		{"generation", "generation"},
		{"cooldown_until_ns", "cooldown_until"},
		{"config.version", "config.version"},
		{"history[0].version", "history[0].version"},
		{"verify.calls", "verify.calls"},
		{"verify.failures", "verify.failures"},
		{"verify.latency_ns", "verify.latency_ns"},
		{"verify.consecutive", "verify.consecutive"},
		{"control.latency_ns", "control.latency_ns"},
		{"changes[0].after.calls", "changes[0].after.calls"},
		{"rejected[0].config.version", "rejected[0].config.version"},
		{"tracker.window.width_ns", "calls.window"},
		{"tracker.window.head", "calls.window.newest"},
		{"tracker.window.slots[3].c", "tracker.window.slots.c"},
		{"tracker.window.slots[3].f", "tracker.window.slots.f"},
		{"tracker.window.slots[3].l", "calls.window.buckets["},
		{"tracker.day.head", "calls.last_24h.newest"},
		{"tracker.day.slots[7]", "tracker.day.slots"},
		{"tracker.fail_end[3]", "calls.failures[3].end"},
		{"tracker.fail_gen[3]", "tracker.fail_gen"},
		{"tracker.recent[3].e", "calls.failures["},
		{"tracker.recent[3].d", "calls.failures[3].duration_ns"},
		{"tracker.recent[3].v", "tracker.recent.v|calls.failures[3].version"},
		{"tracker.recent[3].cl", "tracker.recent.cl"},
		{"tracker.call_end[3]", "calls.latest["},
		{"tracker.call_dur[3]", "calls.latest[2].duration_ns"},
		{"tracker.call_fail", "tracker.call_fail"},
		{"tracker.call_pos", "tracker.call_pos"},
		{"tracker.fail_pos", "tracker.fail_pos"},
		{"tracker.recent_pos", "tracker.recent_pos"},
		{"tracker.consecutive", "calls.consecutive_failures"},
		{"tracker.total", "calls.total"},
		{"tracker.ignored", "calls.ignored"},
		{"clusters[0].total", "clusters[0].total"},
		{"clusters[0].first", "clusters[0].first_seen"},
		{"clusters[0].last", "clusters[0].last_seen"},
		{"clusters[0].width_ns", "clusters[0].window"},
		{"clusters[0].head", "clusters[0].window.newest"},
		{"clusters[0].slots[2]", "clusters.slots"},
		{"proposals[0].count", "proposals[0].count"},
	}
	for _, f := range fields {
		for _, v := range extremes {
			t.Run(fmt.Sprintf("%s=%d", f.v1, v), func(t *testing.T) {
				checkRejected(t, setJSON(t, docA, f.v1, json.Number(strconv.FormatInt(v, 10))), a.id, f.want)
			})
		}
	}
	for _, v := range extremes {
		t.Run(fmt.Sprintf("circuit_open_until_ns=%d", v), func(t *testing.T) {
			checkRejected(t, setJSON(t, docB, "circuit_open_until_ns", json.Number(strconv.FormatInt(v, 10))), b.id, "circuit_open_until")
		})
	}
}

func TestDecodeStateRejects(t *testing.T) {
	a := stateGoldens[0]
	doc, v1 := readTestdata(t, a.v2), readTestdata(t, a.v1)
	set := func(path string, v any) []byte { return setJSON(t, doc, path, v) }
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	var parsed map[string]any
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	calls := parsed["calls"].(map[string]any)
	failures := calls["failures"].([]any)
	cluster := parsed["clusters"].([]any)[0]
	tests := []struct {
		name string
		data []byte
		id   string
		want string
	}{
		{"no format", []byte(`{"agent_id_b64":"YQ=="}`), "a", "unknown format 0"},
		{"format 3", set("format", 3), a.id, "unknown format 3"},
		{"format as a string", set("format", "2"), a.id, "format"},
		{"not JSON", []byte("{\"format\":2,"), a.id, "unexpected end"},
		{"another agent", doc, "someone else", "another agent ID"},
		{"bad base64", set("agent_id_b64", "!!"), a.id, "agent_id_b64"},
		{"version above max_version", set("max_version", 2), a.id, "config.version: 3 out of range [1, 3)"},
		{"verifying another config", set("verifying.to.version", 2), a.id, "not the current config"},
		{"invalid config", set("config.timeout", "-1s"), a.id, "config: selfimprove: invalid config"},
		{"too many history entries", set("history", many(maxHistory+1, map[string]any{"version": 1})), a.id, "history: 17 configs, at most 16"},
		{"too many changes", set("changes", many(maxChanges+1, parsed["changes"].([]any)[0])), a.id, "changes: 17"},
		{"too many rejected", set("rejected", many(maxRejected+1, parsed["rejected"].([]any)[0])), a.id, "rejected: 33"},
		{"too many clusters", set("clusters", many(maxClusters+1, cluster)), a.id, "clusters: 9"},
		{"too many proposals", set("proposals", many(maxProposals+1, parsed["proposals"].([]any)[0])), a.id, "proposals: 17"},
		{"too many failures", set("calls.failures", many(failRing+1, failures[0])), a.id, "calls.failures: 65 failures"},
		{"too many failure details", set("calls.failures", many(recentRing+1, failures[0])), a.id, "17 failures with details"},
		{"too many latest calls", set("calls.latest", many(maxBeforeCalls+1, calls["latest"].([]any)[0])), a.id, "calls.latest: 17"},
		{"a failure without details after one with", set("calls.failures[5]", map[string]any{"end": "2026-03-01T14:27:07Z", "generation": 1}), a.id, "calls.failures[5]: no details"},
		{"a detailed failure without version", set("calls.failures[5]", map[string]any{"end": "2026-03-01T14:27:07Z", "duration_ns": 1}), a.id, "calls.failures[5].version: missing"},
		{"a failure at 1970", set("calls.failures[0].end", "1970-01-01T00:00:00Z"), a.id, "calls.failures[0].end"},
		{"a call at 1970", set("calls.latest[0].end", "1970-01-01T00:00:00Z"), a.id, "calls.latest[0].end"},
		{"too many outages", set("calls.outages", many(maxOutages+1, map[string]any{"end": "2026-03-01T14:27:07Z", "failures": 5})), a.id, "calls.outages: 9 outages"},
		{"an outage of 9 failures", set("calls.outages", []any{map[string]any{"end": "2026-03-01T14:27:07Z", "failures": 9}}), a.id, "calls.outages[0].failures: 9 out of range"},
		{"an outage in 1969", set("calls.outages", []any{map[string]any{"end": "1969-12-31T00:00:00Z", "failures": 5}}), a.id, "calls.outages[0].end"},
		{"a bad cluster ID", set("calls.failures[0].cluster", "xyz"), a.id, "calls.failures[0].cluster"},
		{"a cluster ID not hex", set("clusters[0].id", "zzzzzzzzzzzzzzzz"), a.id, "clusters[0].id"},
		{"bucket off its boundary", set("calls.window.buckets[0].start", "2026-03-01T12:00:01Z"), a.id, "not on a bucket boundary"},
		{"bucket outside the window", set("calls.window.buckets[0].start", "2026-02-01T00:00:00Z"), a.id, "outside the window"},
		{"buckets out of order", set("calls.window.buckets[1].start", "2026-03-01T12:00:00Z"), a.id, "not after the previous bucket"},
		{"newest off its boundary", set("calls.window.newest", "2026-03-01T17:26:16Z"), a.id, "calls.window.newest"},
		{"failures above calls in a bucket", set("calls.window.buckets[0].failures", 2), a.id, "calls.window.buckets[0].failures"},
		{"window latency sum too big", set("calls.window.buckets[1].latency_ns", json.Number(strconv.FormatInt(maxNanos-50_000_000, 10))), a.id, "calls.window.buckets[1].latency_ns"},
		{"day bucket of another width", set("calls.last_24h.bucket_ns", int64(60_000_000_000)), a.id, "calls.last_24h.bucket_ns"},
		{"day bucket over 65535", set("calls.last_24h.buckets[0].calls", 65536), a.id, "calls.last_24h.buckets[0].calls"},
		{"cluster first seen after last", set("clusters[0].first_seen", "2026-03-01T18:00:00Z"), a.id, "clusters[0].first_seen: after last_seen"},
		{"failure version above max", set("calls.failures[0].version", 4), a.id, "calls.failures[0].version"},
		{"consecutive above failures", set("verify.consecutive_failures", 5), a.id, "verify.consecutive_failures"},
		{"proposal confidence above 1", set("proposals[0].confidence", 2), a.id, "proposals[0].confidence"},
		{"success rate above 1", set("changes[0].window.success_rate", 2), a.id, "changes[0].window.success_rate"},
		{"threshold out of range", set("threshold.window", "9000h"), a.id, "threshold"},
		{"format 1: gap in the failure ring", setJSON(t, setJSON(t, v1, "tracker.fail_end[5]", 0), "tracker.fail_gen[5]", 0), a.id, "an empty slot between events"},
		{"format 1: details of another failure", setJSON(t, v1, "tracker.recent[5].e", 1), a.id, "details are those of another failure"},
		{"format 1: ring position beyond the ring", setJSON(t, v1, "tracker.call_pos", 16), a.id, "ring position 16"},
		{"format 1: a bucket before 1970", setJSON(t, setJSON(t, v1, "tracker.window.head", 3), "tracker.window.slots[60].c", 1), a.id, "before 1970"},
		{"format 1: another agent", v1, "b", "another agent ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRejected(t, tt.data, tt.id, tt.want)
		})
	}
}

// TestDecodeStateErrorsNameFormat1 checks that an error in a format 1
// file says so.
func TestDecodeStateErrorsNameFormat1(t *testing.T) {
	a := stateGoldens[0]
	_, err := decodeState(setJSON(t, readTestdata(t, a.v1), "tracker.total", -1), a.id)
	if err == nil || !regexp.MustCompile(`^format 1: calls\.total: -1 out of range`).MatchString(err.Error()) {
		t.Fatalf("error = %v", err)
	}
}
