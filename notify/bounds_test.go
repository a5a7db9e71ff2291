package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/looptest"
	"github.com/self-improving-loop/selfimprove/notify"
)

// TestSlackSummaryOfManyAgents: Slack takes at most 50 blocks in a
// message and answers 400 invalid_blocks otherwise, which is not
// redelivered. Before, the daily summary had one field per agent: one of
// 600 agents made 62 blocks and was never delivered. Now it lists the
// 40 least healthy, and says how many more there are.
func TestSlackSummaryOfManyAgents(t *testing.T) {
	var blocks int
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		var msg struct {
			Blocks []json.RawMessage `json:"blocks"`
		}
		json.Unmarshal(b, &msg)
		blocks = len(msg.Blocks)
		if blocks > 50 {
			w.WriteHeader(http.StatusBadRequest) // as Slack does
			io.WriteString(w, "invalid_blocks")
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	s := &si.Summary{Time: t0}
	for i := range 600 {
		s.Agents = append(s.Agents, si.AgentView{AgentID: fmt.Sprintf("agent-%03d", i), Health: 1})
	}
	s.Agents[417].Health = 0.2 // the one in trouble
	e := si.Event{ID: "e1", Time: t0, Type: si.EventDailySummary, Message: "daily summary", Summary: s}
	if err := (notify.Slack{WebhookURL: srv.URL}).Notify(context.Background(), e); err != nil {
		t.Fatalf("a summary of 600 agents: %v (%d blocks; Slack takes at most 50)", err, blocks)
	}
	if !strings.Contains(body, "agent-417") || !strings.Contains(body, "and 560 more agents") {
		t.Errorf("the summary leaves out the agent in trouble, or the count of the rest: %s", body)
	}
}

// TestRetryWaitStaysAtMaxBackoff: NotifyOptions says Backoff is doubled
// after each attempt up to MaxBackoff. Before, at Attempts 100 the
// doubled wait overflowed time.Duration after about 34 doublings and
// turned negative: 57 of 99 retries went at once to a receiver answering
// 503, the first at attempt 36.
func TestRetryWaitStaysAtMaxBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Time
		n := si.NotifierFunc(func(ctx context.Context, e si.Event) error {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			return &notify.DeliveryError{Notifier: "webhook", Status: http.StatusServiceUnavailable}
		})
		l, emit := looptest.DeliveryLoop(t, n, si.NotifyOptions{Attempts: 100, Backoff: time.Second, MaxBackoff: 30 * time.Second}, nil)
		emit("r1")
		time.Sleep(3 * time.Hour)
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 100 {
			t.Errorf("%d attempts, want 100", len(at))
		}
		for i := 1; i < len(at); i++ {
			want := min(time.Second<<min(i-1, 10), 30*time.Second)
			if w := at[i].Sub(at[i-1]); w != want {
				t.Fatalf("attempt %d came %v after the one before, want %v", i+1, w, want)
			}
		}
	})
}
