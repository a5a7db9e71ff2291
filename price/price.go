// Package price turns the token usage of an LLM response into a cost,
// with a table of per-model prices the program supplies, and reports it
// as the call's cost (selfimprove.AddCost): the loop then books it per
// config version and route, and verifies changes on cost per successful
// call (docs/quality.md). Transport does it for any OpenAI-compatible
// API reached through an http.Client (the framework adapters eino,
// genkit and langchaingo take it as their HTTP client's base), and the
// SDK adapters (integrations/openai, anthropic, goopenai) take a Table
// and report every response's usage.
package price

import (
	"context"
	"strings"
	"sync"

	"github.com/self-improving-loop/selfimprove"
)

// Price is what a model costs per million tokens, in the unit the
// program books its costs in (dollars, cents, credits).
type Price struct {
	// Input is the price of a million input (prompt) tokens.
	Input float64
	// Output is the price of a million output (completion) tokens,
	// reasoning tokens included.
	Output float64
	// CachedInput is the price of a million input tokens read from the
	// provider's prompt cache. Default 0: priced as Input.
	CachedInput float64
}

// Table maps a model name, as the provider's response names it, to its
// price. A name with a date suffix ("gpt-4o-mini-2024-07-18",
// "claude-3-5-haiku-20241022") that is not in the table takes the price
// of the name without it ("gpt-4o-mini"). Transport and the
// integrations (integrations/openai, anthropic, goopenai, and eino,
// genkit, langchaingo through Transport) report each call's token usage
// priced by it with AddCost; see docs/quality.md.
type Table map[string]Price

// Usage is the tokens one response counted.
type Usage struct {
	// Input counts all the input tokens, CachedInput those of them read
	// from the provider's prompt cache (at most Input).
	Input, CachedInput int64
	// Output counts the output tokens.
	Output int64
}

// Lookup returns the price of model: its own, else that of its name
// without a date suffix ("-2024-07-18", "-20241022"); false when it has
// none.
func (p Table) Lookup(model string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, true
	}
	for _, n := range [...]int{len("-2024-07-18"), len("-20241022")} {
		if base, ok := cutDate(model, n); ok {
			if pr, ok := p[base]; ok {
				return pr, true
			}
		}
	}
	return Price{}, false
}

// cutDate returns model without a date suffix of n bytes: a dash, then
// digits and, in the longer form, dashes where a date has them.
func cutDate(model string, n int) (string, bool) {
	if len(model) <= n || model[len(model)-n] != '-' {
		return "", false
	}
	for i, c := range model[len(model)-n+1:] {
		dash := n == len("-2024-07-18") && (i == 4 || i == 7)
		if dash != (c == '-') || !dash && (c < '0' || c > '9') {
			return "", false
		}
	}
	return strings.TrimSuffix(model, model[len(model)-n:]), true
}

// Cost returns what u cost on model: (Input − CachedInput) × Input +
// CachedInput × CachedInput (Input when 0) + Output × Output, per
// million; false when model has no price. Negative counts count as 0.
func (p Table) Cost(model string, u Usage) (float64, bool) {
	pr, ok := p.Lookup(model)
	if !ok {
		return 0, false
	}
	in, cached, out := max(u.Input, 0), min(max(u.CachedInput, 0), max(u.Input, 0)), max(u.Output, 0)
	cp := pr.CachedInput
	if cp == 0 {
		cp = pr.Input
	}
	return (float64(in-cached)*pr.Input + float64(cached)*cp + float64(out)*pr.Output) / 1e6, true
}

// Add reports u, priced for model, as the cost of the call whose
// context is ctx (selfimprove.AddCost), and returns that cost; a model with no price
// reports nothing and returns false.
func (p Table) Add(ctx context.Context, model string, u Usage) (float64, bool) {
	c, ok := p.Cost(model, u)
	if ok {
		selfimprove.AddCost(ctx, c)
	}
	return c, ok
}

// Tally is the token usage of one response as an adapter reads it (a
// whole message, or the events of a stream, each of which may set or
// update it); the zero value has none. Its methods may be called
// concurrently.
type Tally struct {
	mu    sync.Mutex
	model string
	u     Usage
	seen  bool
}

// Set records model's usage u: the last one set is the response's.
func (t *Tally) Set(model string, u Usage) {
	t.Update(func(m *string, v *Usage) bool {
		*m, *v = model, u
		return true
	})
}

// Update lets f change the model and the usage recorded, under the
// tally's lock; f reports whether the response has now reported a
// usage (Report reports nothing until it has).
func (t *Tally) Update(f func(model *string, u *Usage) bool) {
	t.mu.Lock()
	if f(&t.model, &t.u) {
		t.seen = true
	}
	t.mu.Unlock()
}

// Report prices the usage recorded, if the response reported one, with
// p and reports it as the cost of the call whose context is ctx
// (Table.Add).
func (t *Tally) Report(ctx context.Context, p Table) {
	t.mu.Lock()
	model, u, seen := t.model, t.u, t.seen
	t.mu.Unlock()
	if seen {
		p.Add(ctx, model, u)
	}
}
