package admin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// Mount the handler under a prefix; without a token, reads are open and
// mutations are refused.
func ExampleHandler() {
	loop, _ := selfimprove.New(selfimprove.WithStore(selfimprove.NewRAMStore()), selfimprove.WithNotifier(nil))
	defer loop.Close()
	loop.MarkCritical("checkout", true)

	mux := http.NewServeMux()
	mux.Handle("/selfimprove/", http.StripPrefix("/selfimprove", admin.Handler(loop, admin.Options{})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, _ := http.Get(srv.URL + "/selfimprove/api/agents/checkout")
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, strings.Contains(string(b), `"critical":true`))

	res, _ = http.Post(srv.URL+"/selfimprove/api/agents/checkout/critical", "application/json", strings.NewReader(`{"critical":false}`))
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Print(res.StatusCode, " ", string(b))
	// Output:
	// 200 true
	// 403 {"error":"no token configured: mutations are disabled (set admin.Options.Token)","status":403}
}

// Serve the embedded dashboard on its own, here under /ui/; admin.Handler
// serves it at its root already.
func ExampleDashboard() {
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", admin.Dashboard()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, _ := http.Get(srv.URL + "/ui/")
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, strings.Contains(string(b), `<script src="app.js"`))
	// Output:
	// 200 true
}
