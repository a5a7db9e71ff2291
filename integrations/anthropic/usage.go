package anthropic

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	ant "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/self-improving-loop/selfimprove/internal/usage"
	"github.com/self-improving-loop/selfimprove/price"
)

// WithPrices returns a client option (add it after ClientOptions) that
// reports the token usage of each successful response, priced by prices,
// as the cost of the loop's call whose context made the request
// (selfimprove.AddCost): a message's usage, and a streamed one's from
// its message_start and message_delta events. Input tokens count those
// written to and read from the prompt cache; those read are priced at
// CachedInput. A model missing from prices reports nothing. The cost is
// booked once the client has read the response, before the SDK call
// returns (a stream: once it ends or is closed), so within fn. See
// docs/quality.md for the one call a program makes at start-up so that
// costs are booked.
func WithPrices(prices price.Table) option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err == nil && len(prices) > 0 {
			t := &tally{}
			usage.Watch(res, t.note, func() { t.report(req.Context(), prices) })
		}
		return res, err
	})
}

// UsageOf returns the usage a message counted, as price.Table
// prices it.
func UsageOf(u ant.Usage) price.Usage {
	return price.Usage{Input: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, CachedInput: u.CacheReadInputTokens, Output: u.OutputTokens}
}

// tally is the usage one response reported.
type tally struct {
	mu    sync.Mutex
	model string
	u     price.Usage
	seen  bool
}

// note reads one JSON document of the response: a message, or a stream
// event that carries a usage.
func (t *tally) note(data []byte) {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &head) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch head.Type {
	case "message":
		var m ant.Message
		if json.Unmarshal(data, &m) == nil {
			t.model, t.u, t.seen = string(m.Model), UsageOf(m.Usage), true
		}
	case "message_start":
		var ev ant.MessageStartEvent
		if json.Unmarshal(data, &ev) == nil {
			t.model, t.u, t.seen = string(ev.Message.Model), UsageOf(ev.Message.Usage), true
		}
	case "message_delta":
		// Its counts are the message's so far: the output's, and the
		// input's when it gives them.
		var ev ant.MessageDeltaEvent
		if json.Unmarshal(data, &ev) == nil {
			d := ev.Usage
			if in := d.InputTokens + d.CacheCreationInputTokens + d.CacheReadInputTokens; in > 0 {
				t.u.Input, t.u.CachedInput = in, d.CacheReadInputTokens
			}
			t.u.Output = max(t.u.Output, d.OutputTokens)
		}
	}
}

// report books the usage noted, if any.
func (t *tally) report(ctx context.Context, prices price.Table) {
	t.mu.Lock()
	model, u, seen := t.model, t.u, t.seen
	t.mu.Unlock()
	if seen {
		prices.Add(ctx, model, u)
	}
}
