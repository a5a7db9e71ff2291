package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/notify"
)

// A Loop that posts its events to Slack. The incoming webhook here is a
// local test server (plain http is accepted on loopback only); Close
// delivers what is queued.
func Example() {
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ Text string }
		json.NewDecoder(r.Body).Decode(&msg)
		fmt.Println("slack got:", msg.Text)
	}))
	defer slack.Close()

	loop, err := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithStrategy(nil),
		selfimprove.WithNotifier(notify.Slack{WebhookURL: slack.URL + "/services/T000/B000/XXXX"}))
	if err != nil {
		log.Fatal(err)
	}
	if err := loop.SetConfig("search", selfimprove.Config{Route: "fallback"}); err != nil {
		log.Fatal(err)
	}
	if err := loop.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("delivered:", loop.Metrics().Notified)
	// Output:
	// slack got: config set: agent "search": config set to v2 by operator
	// delivered: 1
}

// A receiver of Webhook's requests checks the signature: an HMAC-SHA256
// of the timestamp, a dot and the body, keyed with the shared secret.
func ExampleWebhook() {
	const secret = "shared-secret"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get("X-Selfimprove-Timestamp")
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(r.Header.Get("X-Selfimprove-Signature")), []byte(want)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e selfimprove.Event
		json.Unmarshal(body, &e)
		fmt.Println("verified:", e.Type, e.AgentID)
	}))
	defer receiver.Close()

	n := notify.Webhook{URL: receiver.URL, Secret: secret}
	err := n.Notify(context.Background(), selfimprove.Event{Type: selfimprove.EventRolledBack, AgentID: "search"})
	fmt.Println("error:", err)
	// Output:
	// verified: rolled_back search
	// error: <nil>
}
