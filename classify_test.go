package selfimprove_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	si "github.com/self-improving-loop/selfimprove"
)

// statusErr reports an HTTP status the way API client libraries do.
type statusErr struct {
	code int
	msg  string
}

func (e statusErr) Error() string   { return e.msg }
func (e statusErr) StatusCode() int { return e.code }

type awsErr struct{ code int }

func (e awsErr) Error() string       { return "operation error" }
func (e awsErr) HTTPStatusCode() int { return e.code }

// labelled names its own class.
type labelled struct{ c si.Class }

func (e labelled) Error() string                { return "rate limit" } // the label wins over the text
func (e labelled) FailureClass() si.Class       { return e.c }
func (e labelled) Unwrap() error                { return context.DeadlineExceeded }
func (e panicky) Error() string                 { panic("boom") }
func (e panicky) FailureClass() si.Class        { panic("boom") }
func (e panicky) StatusCode() int               { panic("boom") }
func (e timeoutErr) Error() string              { return "i/o operation failed" }
func (e timeoutErr) Timeout() bool              { return true }
func (e timeoutErr) Temporary() bool            { return false }
func (e notTimeoutErr) Error() string           { return "connection refused by peer" }
func (e notTimeoutErr) Timeout() bool           { return false }
func (e notTimeoutErr) Temporary() bool         { return false }
func (e customClassErr) Error() string          { return "whatever" }
func (e customClassErr) FailureClass() si.Class { return "billing" }

// badUnwrap panics in Unwrap and Is, as a nil pointer's methods can.
type badUnwrap struct{}

func (badUnwrap) Error() string { return "rate limit" }
func (badUnwrap) Unwrap() error { panic("nil pointer") }
func (badUnwrap) Is(error) bool { panic("nil pointer") }

type (
	panicky        struct{}
	timeoutErr     struct{}
	notTimeoutErr  struct{}
	customClassErr struct{}
)

func TestClassify(t *testing.T) {
	e := errors.New
	cases := []struct {
		name string
		err  error
		want si.Class
	}{
		// Go's own signals.
		{"nil", nil, si.ClassOther},
		{"deadline", context.DeadlineExceeded, si.ClassTimeout},
		{"wrapped deadline", fmt.Errorf("calling model: %w", context.DeadlineExceeded), si.ClassTimeout},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), si.ClassTimeout},
		{"canceled", context.Canceled, si.ClassCanceled},
		{"joined canceled", errors.Join(e("step 2"), context.Canceled), si.ClassCanceled},
		{"net.Error timeout", &url.Error{Op: "Post", URL: "https://api.example.com", Err: timeoutErr{}}, si.ClassTimeout},
		{"net.Error no timeout falls to text", notTimeoutErr{}, si.ClassNetwork},
		{"ECONNREFUSED", &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, si.ClassNetwork},
		{"ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), si.ClassNetwork},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), si.ClassNetwork},
		{"ETIMEDOUT", fmt.Errorf("connect: %w", syscall.ETIMEDOUT), si.ClassTimeout},
		{"DNS", &net.DNSError{Err: "no such host", Name: "api.example.com"}, si.ClassNetwork},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, si.ClassTimeout},
		{"EOF", fmt.Errorf("decoding body: %w", io.EOF), si.ClassNetwork},
		{"unexpected EOF", io.ErrUnexpectedEOF, si.ClassNetwork},
		{"StatusCode 429", statusErr{429, "request failed"}, si.ClassRateLimit},
		{"StatusCode 401", statusErr{401, "request failed"}, si.ClassAuth},
		{"StatusCode 403", statusErr{403, "request failed"}, si.ClassAuth},
		{"StatusCode 400", statusErr{400, "request failed"}, si.ClassBadRequest},
		{"StatusCode 422", statusErr{422, "request failed"}, si.ClassBadRequest},
		{"StatusCode 404", statusErr{404, "request failed"}, si.ClassNotFound},
		{"StatusCode 408", statusErr{408, "request failed"}, si.ClassTimeout},
		{"StatusCode 503", statusErr{503, "request failed"}, si.ClassOverloaded},
		{"StatusCode 500 beats generic text", statusErr{500, "connection reset by upstream"}, si.ClassOverloaded},
		{"HTTPStatusCode 429 wrapped", fmt.Errorf("op: %w", awsErr{429}), si.ClassRateLimit},
		{"StatusCode 400 with context length text", statusErr{400, "This model's maximum context length is 8192 tokens"}, si.ClassContextLength},
		{"StatusCode 404 with model text", statusErr{404, "The model `gpt-9` does not exist"}, si.ClassModelUnavailable},
		{"FailureClass label", labelled{si.ClassToolError}, si.ClassToolError},
		{"FailureClass beats wrapped deadline", fmt.Errorf("x: %w", labelled{si.ClassAuth}), si.ClassAuth},
		{"custom class", customClassErr{}, si.Class("billing")},
		{"methods that panic", panicky{}, si.ClassOther},
		{"Unwrap and Is that panic", badUnwrap{}, si.ClassOther},
		// Text rules.
		{"429 in text", e("429 Too Many Requests"), si.ClassRateLimit},
		{"status 429", e("upstream returned status 429"), si.ClassRateLimit},
		{"HTTP/1.1 503", e("HTTP/1.1 503 Service Unavailable"), si.ClassOverloaded},
		{"number containing 429 is not a status", e("request 14290 failed"), si.ClassOther},
		{"429 inside an ID", e("job a429b failed"), si.ClassOther},
		{"number after a plain word", e("retried after 500 ms"), si.ClassOther},
		{"RateLimitError CamelCase", e("RateLimitError: slow"), si.ClassRateLimit},
		{"snake_case", e("rate_limit_exceeded"), si.ClassRateLimit},
		{"ratelimited one word", e("client ratelimited"), si.ClassRateLimit},
		{"quota", e("You exceeded your current quota, please check your plan"), si.ClassQuota},
		{"throttling", e("ThrottlingException: Rate exceeded"), si.ClassRateLimit},
		{"resource exhausted", e("rpc error: code = ResourceExhausted desc = limit"), si.ClassRateLimit},
		{"timed out", e("the request timed out"), si.ClassTimeout},
		{"deadline text", e("context deadline exceeded (Client.Timeout exceeded while awaiting headers)"), si.ClassTimeout},
		{"i/o timeout beats dial", e("dial tcp 10.0.0.1:443: i/o timeout"), si.ClassTimeout},
		{"gateway timeout is overloaded", e("504 Gateway Timeout"), si.ClassOverloaded},
		{"overloaded", e("Overloaded"), si.ClassOverloaded},
		{"anthropic overloaded_error", e(`{"type":"error","error":{"type":"overloaded_error"}}`), si.ClassOverloaded},
		{"model temporarily unavailable is overloaded", e("the model is temporarily unavailable"), si.ClassOverloaded},
		{"service unavailable", e("service unavailable"), si.ClassOverloaded},
		{"internal server error", e("InternalServerError: something broke"), si.ClassOverloaded},
		{"connection refused", e("dial tcp 127.0.0.1:8080: connect: connection refused"), si.ClassNetwork},
		{"no such host", e("lookup api.example.com: no such host"), si.ClassNetwork},
		{"tls", e("remote error: tls: handshake failure"), si.ClassNetwork},
		{"tls handshake", e("TLS handshake timeout"), si.ClassTimeout},
		{"unexpected EOF text", e("unexpected EOF"), si.ClassNetwork},
		{"401 text", e("Error code: 401 - invalid api key"), si.ClassAuth},
		{"invalid api key", e("Incorrect API key provided"), si.ClassAuth},
		{"permission denied", e("PermissionDenied: caller lacks access"), si.ClassAuth},
		{"forbidden", e("403 Forbidden"), si.ClassAuth},
		{"bad request", e("400 Bad Request"), si.ClassBadRequest},
		{"validation", e("ValidationError: field 'messages' is required"), si.ClassBadRequest},
		{"schema", e("output does not match the JSON schema"), si.ClassBadRequest},
		{"not found", e("file not found"), si.ClassNotFound},
		{"404 text", e("error 404"), si.ClassNotFound},
		{"model not found", e("model_not_found: The model 'gpt-5-turbo' does not exist"), si.ClassModelUnavailable},
		{"model deprecated", e("The model text-davinci-003 has been deprecated"), si.ClassModelUnavailable},
		{"model decommissioned", e("model llama2-70b has been decommissioned"), si.ClassModelUnavailable},
		{"unknown model", e("unknown model: claude-9"), si.ClassModelUnavailable},
		{"context length", e("context_length_exceeded"), si.ClassContextLength},
		{"too many tokens", e("Too many tokens in prompt"), si.ClassContextLength},
		{"prompt too long", e("prompt is too long: 210000 tokens > 200000 maximum"), si.ClassContextLength},
		{"context window", e("input exceeds the context window"), si.ClassContextLength},
		{"empty response", e("LLM returned an empty response"), si.ClassEmptyResponse},
		{"no choices", e("no choices in completion"), si.ClassEmptyResponse},
		{"content filter", e("finish_reason: content_filter"), si.ClassContentFilter},
		{"safety", e("Response blocked due to SAFETY"), si.ClassContentFilter},
		{"refusal", e("the model refused to answer"), si.ClassContentFilter},
		{"tool error", e("tool call failed: search_web"), si.ClassToolError},
		{"function call", e("function call get_weather raised"), si.ClassToolError},
		{"panic text without a panic", e("the panic button"), si.ClassOther},
		{"cancelled text", e("operation was cancelled"), si.ClassCanceled},
		{"unrelated", e("something odd happened"), si.ClassOther},
		{"non-ASCII", e("ошибка: превышен лимит"), si.ClassOther},
		{"non-ASCII with status", e("ошибка HTTP 429"), si.ClassRateLimit},
		{"empty text", e(""), si.ClassOther},
		{"secret scrubbed first still classified", e("invalid api_key=sk-abcdefghijklmnopqrstuvwx"), si.ClassAuth},
	}
	if len(cases) < 60 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if got := si.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

func TestRootCause(t *testing.T) {
	got := map[si.Class]si.RootCause{}
	for _, c := range []si.Class{si.ClassRateLimit, si.ClassTimeout, si.ClassOverloaded, si.ClassNetwork, si.ClassAuth,
		si.ClassBadRequest, si.ClassNotFound, si.ClassModelUnavailable, si.ClassContextLength, si.ClassEmptyResponse,
		si.ClassContentFilter, si.ClassToolError, si.ClassPanic, si.ClassCanceled, si.ClassOther, "billing"} {
		got[c] = c.RootCause()
	}
	want := map[si.Class]si.RootCause{
		si.ClassRateLimit: si.RootCauseToolFailure, si.ClassTimeout: si.RootCauseToolFailure,
		si.ClassOverloaded: si.RootCauseToolFailure, si.ClassNetwork: si.RootCauseToolFailure,
		si.ClassAuth: si.RootCauseToolFailure, si.ClassModelUnavailable: si.RootCauseToolFailure,
		si.ClassToolError: si.RootCauseToolFailure, si.ClassCanceled: si.RootCauseToolFailure,
		si.ClassBadRequest: si.RootCauseInstructionAmbiguity, si.ClassContentFilter: si.RootCauseInstructionAmbiguity,
		si.ClassNotFound: si.RootCauseKnowledgeGap, si.ClassContextLength: si.RootCauseContextLoss,
		si.ClassEmptyResponse: si.RootCauseReasoningError, si.ClassPanic: si.RootCauseReasoningError,
		si.ClassOther: si.RootCauseReasoningError, "billing": si.RootCauseReasoningError,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
}

func TestSignature(t *testing.T) {
	cases := []struct{ in, want string }{
		{"timeout after 30s on req 123", "timeout after <n>s on req <n>"},
		{"timeout after 45s on req 999", "timeout after <n>s on req <n>"},
		{"  Connection   RESET\tby peer\n", "connection reset by peer"},
		{"request 550e8400-e29b-41d4-a716-446655440000 failed", "request <uuid> failed"},
		{"trace 9f86d081884c7d65 dropped", "trace <hex> dropped"},
		{"pointer 0xc000123abc", "pointer <hex>"},
		{"deadbeef is a word", "deadbeef is a word"}, // no digit: a word, not an ID
		{"took 1.25s, 3,000 tokens", "took <n>s, <n> tokens"},
		{`model "gpt-4o" not found`, "model <str> not found"},
		{"model 'claude-3' not found", "model <str> not found"},
		{"can't parse `x`", "can't parse <str>"},
		{"GET https://api.example.com/v1/chat?x=1 failed", "get <url> failed"},
		{"open /var/log/app/2024-01-01.log: no such file", "open <path> no such file"},
		{"open ./data/x.json failed", "open <path> failed"},
		{`read C:\Users\bob\a.txt failed`, "read <path> failed"},
		{"and/or stays", "and/or stays"},
		{"dial tcp 10.0.0.1:443: refused", "dial tcp <n>:<n>: refused"},
		{"Ошибка 500: Сервис недоступен", "ошибка <n>: сервис недоступен"},
		{"错误代码 42 发生", "错误代码 <n> 发生"},
		{"key sk-abcdefghijklmnop1234 rejected", "key sk-<redacted> rejected"},
		{"unterminated \"quote here", "unterminated \"quote here"},
		{"", ""},
		{strings.Repeat("é", 200), strings.Repeat("é", 120)},
		{strings.Repeat("ab ", 100), strings.TrimSpace(strings.Repeat("ab ", 40))},
	}
	if len(cases) < 20 {
		t.Fatal("too few cases")
	}
	for _, c := range cases {
		got := si.Signature(c.in)
		if got != c.want {
			t.Errorf("Signature(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := si.Signature(got); again != got {
			t.Errorf("Signature not idempotent on %q: %q", got, again)
		}
	}
	if a, b := si.ClusterID(si.Signature("timeout after 30s")), si.ClusterID(si.Signature("timeout after 45s")); a != b || len(a) != 16 {
		t.Errorf("cluster IDs %q, %q", a, b)
	}
	// Stable across processes and releases: FNV-1a, a fixed value.
	if got := si.ClusterID("timeout after <n>s on req <n>"); got != "4cea57989c4c2924" {
		t.Errorf("cluster ID of the reference signature = %s, want 4cea57989c4c2924", got)
	}
}

func TestScrub(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"openai key", "Incorrect API key provided: sk-proj-AbCdEf0123456789xyzXYZ.", "Incorrect API key provided: sk-<redacted>."},
		{"stripe key", "key sk_live_51HxYzAbCdEfGhIjKl rejected", "key sk_<redacted> rejected"},
		{"slack token", "token xoxb-123456789012-abcdefghijklmn invalid", "token <redacted> invalid"},
		{"github token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789 expired", "ghp_<redacted> expired"},
		{"aws key id", "AKIAIOSFODNN7EXAMPLE denied", "<redacted> denied"},
		{"bearer", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig failed", "Authorization: Bearer <redacted> failed"},
		{"basic", "sent Basic dXNlcjpwYXNzd29yZA== to proxy", "sent Basic <redacted> to proxy"},
		{"bearer after other white space", "BeArer\f\u00a0AAAAAAAA", "BeArer\f\u00a0<redacted>"},
		{"value on the next line", "password:\n hunter2", "password:\n <redacted>"},
		{"password=", "login failed for password=hunter2&user=bob", "login failed for password=<redacted>&user=bob"},
		{"api_key=", "GET /v1?api_key=abc123&q=1 failed", "GET /v1?api_key=<redacted>&q=1 failed"},
		{"json api_key", `{"api_key": "abc 123", "model": "x"}`, `{"api_key": "<redacted>", "model": "x"}`},
		{"client_secret:", "client_secret: s3cr3t", "client_secret: <redacted>"},
		{"url userinfo", "dial https://bob:hunter2@db.example.com/x failed", "dial https://<redacted>@db.example.com/x failed"},
		{"long hex", "signature 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 mismatch", "signature <redacted> mismatch"},
		{"mixed token", "session abcDEF123ghiJKL456mnoPQR789stuVWX0 bad", "session <redacted> bad"},
		{"telegram bot token", "bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq/sendMessage", "bot123456789:<redacted>/sendMessage"},
		{"max_tokens is a count", "max_tokens=4096 too large", "max_tokens=4096 too large"},
		{"nothing", "connection refused", "connection refused"},
		{"short hex kept", "trace 9f86d081 dropped", "trace 9f86d081 dropped"},
	}
	for _, c := range cases {
		got := si.Scrub(c.in)
		if got != c.want {
			t.Errorf("%s: Scrub(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if again := si.Scrub(got); again != got {
			t.Errorf("%s: Scrub not idempotent: %q → %q", c.name, got, again)
		}
	}
	if n := testing.AllocsPerRun(100, func() { si.Scrub("connection refused by upstream host after 3 retries") }); n != 0 {
		t.Errorf("Scrub of a clean text allocates %v times", n)
	}
}
