package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	si "github.com/self-improving-loop/selfimprove"
)

// similarWords make up the remembered errors: 400 words, so that 100,000
// errors of 6–12 of them share words as real error messages do.
var similarWords = func() []string {
	base := []string{"timeout", "deadline", "exceeded", "connection", "refused", "reset", "rate", "limit", "quota",
		"model", "unavailable", "overloaded", "invalid", "request", "token", "context", "length", "tool", "failed",
		"upstream", "gateway", "service", "error", "response", "empty", "parse", "json", "schema", "field", "missing"}
	out := append([]string(nil), base...)
	for i := len(base); i < 400; i++ {
		out = append(out, fmt.Sprintf("w%c%c%c", 'a'+i%26, 'a'+i/26%26, 'k'+i/676))
	}
	return out
}()

// similarText returns a random error text of 6–12 words.
func similarText(rng *rand.Rand) string {
	n := 6 + rng.IntN(7)
	w := make([]string, n)
	for i := range w {
		w[i] = similarWords[rng.IntN(len(similarWords))]
	}
	return strings.Join(w, " ")
}

// BenchmarkSimilar100k measures Similar over 100,000 remembered clusters
// (budget 10 ms).
func BenchmarkSimilar100k(b *testing.B) {
	const n = 100000
	l := newLoop(b, si.WithMemory(si.MemoryOptions{MaxClusters: n}))
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	texts := make([]string, n)
	for i := range texts {
		texts[i] = similarText(rng)
		err := errors.New(texts[i])
		l.ExecuteWithImprovement(ctx, fmt.Sprintf("agent-%d", i%1000), func(context.Context, si.Config) error { return err })
	}
	var buf strings.Builder
	if err := l.ExportMemory(&buf); err != nil {
		b.Fatal(err)
	}
	if c := strings.Count(buf.String(), `"cluster"`); c < n*99/100 {
		b.Fatalf("%d clusters remembered, want about %d", c, n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		// A paraphrase: one word of a remembered error changed.
		q := strings.Fields(texts[i%n])
		q[0] = similarWords[i%len(similarWords)]
		if got := l.Similar(strings.Join(q, " "), 5); len(got) == 0 {
			b.Fatal("no match")
		}
		i += 7919
	}
}
