package selfimprove_test

import (
	"context"
	"fmt"
	"log"

	"github.com/self-improving-loop/selfimprove"
)

// A ladder whose routes declare their limits: a request over the
// primary's window runs on the first route that takes it, for that call
// alone; a short one stays on the primary.
func ExampleWithNeeds() {
	routes := selfimprove.Routes{Primary: "small", Fallbacks: []string{"large"},
		Limits: map[string]selfimprove.RouteLimits{
			"small": {ContextTokens: 8_192},
			"large": {ContextTokens: 200_000},
		}}
	loop, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil), selfimprove.WithRoutes(routes))
	if err != nil {
		log.Fatal(err)
	}
	defer loop.Close()
	for _, tokens := range []int{20_000, 500} {
		// With an SDK: selfimprove.WithNeeds(ctx, siopenai.NeedsOf(params)).
		ctx := selfimprove.WithNeeds(context.Background(), selfimprove.Needs{Tokens: tokens})
		loop.ExecuteWithImprovement(ctx, "summarizer", func(ctx context.Context, cfg selfimprove.Config) error {
			fmt.Printf("%d tokens: model %s\n", tokens, routes.Model(cfg))
			return nil
		})
	}
	// Output:
	// 20000 tokens: model large
	// 500 tokens: model small
}
