package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLLMDocProgram builds docs/llm.md's streaming program (its Go block
// that is a whole program) in a module of its own and runs it against a
// local server that answers as OpenAI does: a 429, then a 503, then the
// stream. The program keeps the default attempts, so it succeeds only
// because the loop retries transient failures twice out of the box, as
// the SDK did before its retries were turned off (issue 27 item 5).
func TestLLMDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "llm.md"))
	if err != nil {
		t.Fatal(err)
	}
	var prog string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if strings.HasPrefix(m[1], "package main\n") {
			prog = m[1]
			break
		}
	}
	if prog == "" {
		t.Fatal("docs/llm.md has no Go block that is a whole program")
	}
	if strings.Contains(prog, "MaxAttempts:") {
		t.Fatal("docs/llm.md's program sets MaxAttempts: it should show the retries the loop makes out of the box")
	}
	dir := buildDocProgram(t, goBin, prog)

	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-request-id", fmt.Sprintf("req_%d", n.Load()+1))
		switch n.Add(1) {
		case 1:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("retry-after-ms", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"Rate limit reached for gpt-4.1 in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		case 2: // a stream cut off half-way: no finish reason, no [DONE]
			w.Header().Set("Content-Type", "text/event-stream")
			head := `{"id":"chatcmpl-d0","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,`
			fmt.Fprintf(w, "data: %s\n\n", head+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
			fmt.Fprintf(w, "data: %s\n\n", head+`"delta":{"content":"Retry, wa"},"logprobs":null,"finish_reason":null}]}`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			head := `{"id":"chatcmpl-d1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,`
			for _, ev := range []string{
				head + `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				head + `"delta":{"content":"Retry, wait, retry"},"logprobs":null,"finish_reason":null}]}`,
				head + `"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
				"[DONE]",
			} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			}
		}
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "llmdoc"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.URL+"/v1/", "OPENAI_API_KEY=sk-test", "XDG_STATE_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/llm.md's program: %v\n%s", err, out)
	}
	// The cut attempt's words are shown, then said void, then the answer.
	if !strings.Contains(string(out), "Retry, wa\n[the answer was cut off; starting again]\nRetry, wait, retry\n(18 bytes, stop)") || n.Load() != 3 {
		t.Fatalf("docs/llm.md's program made %d requests, want 3 (a 429 and a stream cut off, retried); output:\n%s", n.Load(), out)
	}
}

// buildDocProgram builds prog in a module of its own, which requires
// this module and the root through replace directives, offline, and
// returns the directory of the binary, llmdoc.
func buildDocProgram(t *testing.T, goBin, prog string) string {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	// This module's requirements, and this module itself.
	goMod := strings.Replace(string(mod), "module github.com/self-improving-loop/selfimprove/integrations/openai", "module example.com/llmdoc", 1)
	goMod += fmt.Sprintf("\nrequire github.com/self-improving-loop/selfimprove/integrations/openai v0.0.0\n\nreplace github.com/self-improving-loop/selfimprove => %q\n\nreplace github.com/self-improving-loop/selfimprove/integrations/openai => %q\n",
		filepath.Dir(filepath.Dir(here)), here)
	dir := t.TempDir()
	for name, content := range map[string]string{"go.mod": goMod, "go.sum": string(sum), "main.go": prog} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", "llmdoc", ".")
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of docs/llm.md's program, in a module of its own: %v\n%s", err, out)
	}
	return dir
}
