package failure_test

import (
	"context"
	"encoding/json"
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

	"github.com/self-improving-loop/selfimprove/failure"
	"github.com/self-improving-loop/selfimprove/internal/hostileerr"
)

// rawErr carries a provider's error body the way the Stainless SDKs'
// errors do (RawJSON), its status only in its text.
type rawErr struct{ msg, raw string }

func (e rawErr) Error() string   { return e.msg + " " + e.raw }
func (e rawErr) RawJSON() string { return e.raw }

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
type labelled struct{ c failure.Class }

func (e labelled) Error() string                     { return "rate limit" } // the label wins over the text
func (e labelled) FailureClass() failure.Class       { return e.c }
func (e labelled) Unwrap() error                     { return context.DeadlineExceeded }
func (e panicky) Error() string                      { panic("boom") }
func (e panicky) FailureClass() failure.Class        { panic("boom") }
func (e panicky) StatusCode() int                    { panic("boom") }
func (e timeoutErr) Error() string                   { return "i/o operation failed" }
func (e timeoutErr) Timeout() bool                   { return true }
func (e timeoutErr) Temporary() bool                 { return false }
func (e notTimeoutErr) Error() string                { return "connection refused by peer" }
func (e notTimeoutErr) Timeout() bool                { return false }
func (e notTimeoutErr) Temporary() bool              { return false }
func (e customClassErr) Error() string               { return "whatever" }
func (e customClassErr) FailureClass() failure.Class { return "billing" }

type (
	panicky        struct{}
	timeoutErr     struct{}
	notTimeoutErr  struct{}
	customClassErr struct{}
)

// classifyCases are the errors TestClassify classifies, each with the
// class it must get.
// classifyCase is a row of TestClassify.
type classifyCase struct {
	name string
	err  error
	want failure.Class
}

func classifyCases() []classifyCase { return append(classifyCasesA(), classifyCasesB()...) }

func classifyCasesA() []classifyCase {
	e := errors.New
	return []classifyCase{
		// Go's own signals.
		{"nil", nil, failure.ClassOther},
		{"deadline", context.DeadlineExceeded, failure.ClassTimeout},
		{"wrapped deadline", fmt.Errorf("calling model: %w", context.DeadlineExceeded), failure.ClassTimeout},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), failure.ClassTimeout},
		{"canceled", context.Canceled, failure.ClassCanceled},
		{"joined canceled", errors.Join(e("step 2"), context.Canceled), failure.ClassCanceled},
		{"net.Error timeout", &url.Error{Op: "Post", URL: "https://api.example.com", Err: timeoutErr{}}, failure.ClassTimeout},
		{"net.Error no timeout falls to text", notTimeoutErr{}, failure.ClassNetwork},
		{"ECONNREFUSED", &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, failure.ClassNetwork},
		{"ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), failure.ClassNetwork},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), failure.ClassNetwork},
		{"ETIMEDOUT", fmt.Errorf("connect: %w", syscall.ETIMEDOUT), failure.ClassTimeout},
		{"DNS", &net.DNSError{Err: "no such host", Name: "api.example.com"}, failure.ClassNetwork},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, failure.ClassTimeout},
		{"EOF", fmt.Errorf("decoding body: %w", io.EOF), failure.ClassNetwork},
		{"unexpected EOF", io.ErrUnexpectedEOF, failure.ClassNetwork},
		{"StatusCode 429", statusErr{429, "request failed"}, failure.ClassRateLimit},
		{"StatusCode 401", statusErr{401, "request failed"}, failure.ClassAuth},
		{"StatusCode 403", statusErr{403, "request failed"}, failure.ClassAuth},
		{"StatusCode 400", statusErr{400, "request failed"}, failure.ClassBadRequest},
		{"StatusCode 422", statusErr{422, "request failed"}, failure.ClassBadRequest},
		{"StatusCode 404", statusErr{404, "request failed"}, failure.ClassNotFound},
		{"StatusCode 408", statusErr{408, "request failed"}, failure.ClassTimeout},
		{"StatusCode 503", statusErr{503, "request failed"}, failure.ClassOverloaded},
		{"StatusCode 500 beats generic text", statusErr{500, "connection reset by upstream"}, failure.ClassOverloaded},
		{"HTTPStatusCode 429 wrapped", fmt.Errorf("op: %w", awsErr{429}), failure.ClassRateLimit},
		{"StatusCode 400 with context length text", statusErr{400, "This model's maximum context length is 8192 tokens"}, failure.ClassContextLength},
		{"StatusCode 404 with model text", statusErr{404, "The model `gpt-9` does not exist"}, failure.ClassModelUnavailable},
		{"FailureClass label", labelled{failure.ClassToolError}, failure.ClassToolError},
		{"FailureClass beats wrapped deadline", fmt.Errorf("x: %w", labelled{failure.ClassAuth}), failure.ClassAuth},
		{"custom class", customClassErr{}, failure.Class("billing")},
		{"methods that panic", panicky{}, failure.ClassOther},
		{"Unwrap and Is that panic", hostileerr.BadUnwrap{}, failure.ClassOther},
		// Text rules.
		{"429 in text", e("429 Too Many Requests"), failure.ClassRateLimit},
		{"status 429", e("upstream returned status 429"), failure.ClassRateLimit},
		{"HTTP/1.1 503", e("HTTP/1.1 503 Service Unavailable"), failure.ClassOverloaded},
		{"number containing 429 is not a status", e("request 14290 failed"), failure.ClassOther},
		{"429 inside an ID", e("job a429b failed"), failure.ClassOther},
		{"number after a plain word", e("retried after 500 ms"), failure.ClassOther},
		{"RateLimitError CamelCase", e("RateLimitError: slow"), failure.ClassRateLimit},
		{"snake_case", e("rate_limit_exceeded"), failure.ClassRateLimit},
		{"ratelimited one word", e("client ratelimited"), failure.ClassRateLimit},
		{"quota", e("You exceeded your current quota, please check your plan"), failure.ClassQuota},
		{"throttling", e("ThrottlingException: Rate exceeded"), failure.ClassRateLimit},
		{"resource exhausted", e("rpc error: code = ResourceExhausted desc = limit"), failure.ClassRateLimit},
		{"timed out", e("the request timed out"), failure.ClassTimeout},
		{"deadline text", e("context deadline exceeded (Client.Timeout exceeded while awaiting headers)"), failure.ClassTimeout},
	}
}

func classifyCasesB() []classifyCase {
	e := errors.New
	return []classifyCase{
		{"i/o timeout beats dial", e("dial tcp 10.0.0.1:443: i/o timeout"), failure.ClassTimeout},
		{"gateway timeout is overloaded", e("504 Gateway Timeout"), failure.ClassOverloaded},
		{"overloaded", e("Overloaded"), failure.ClassOverloaded},
		{"anthropic overloaded_error", e(`{"type":"error","error":{"type":"overloaded_error"}}`), failure.ClassOverloaded},
		{"model temporarily unavailable is overloaded", e("the model is temporarily unavailable"), failure.ClassOverloaded},
		{"service unavailable", e("service unavailable"), failure.ClassOverloaded},
		{"internal server error", e("InternalServerError: something broke"), failure.ClassOverloaded},
		{"connection refused", e("dial tcp 127.0.0.1:8080: connect: connection refused"), failure.ClassNetwork},
		{"no such host", e("lookup api.example.com: no such host"), failure.ClassNetwork},
		{"tls", e("remote error: tls: handshake failure"), failure.ClassNetwork},
		{"tls handshake", e("TLS handshake timeout"), failure.ClassTimeout},
		{"unexpected EOF text", e("unexpected EOF"), failure.ClassNetwork},
		{"401 text", e("Error code: 401 - invalid api key"), failure.ClassAuth},
		{"invalid api key", e("Incorrect API key provided"), failure.ClassAuth},
		{"permission denied", e("PermissionDenied: caller lacks access"), failure.ClassAuth},
		{"forbidden", e("403 Forbidden"), failure.ClassAuth},
		{"bad request", e("400 Bad Request"), failure.ClassBadRequest},
		{"validation", e("ValidationError: field 'messages' is required"), failure.ClassBadRequest},
		{"schema", e("output does not match the JSON schema"), failure.ClassBadRequest},
		{"not found", e("file not found"), failure.ClassNotFound},
		{"404 text", e("error 404"), failure.ClassNotFound},
		{"model not found", e("model_not_found: The model 'gpt-5-turbo' does not exist"), failure.ClassModelUnavailable},
		{"model deprecated", e("The model text-davinci-003 has been deprecated"), failure.ClassModelUnavailable},
		{"model decommissioned", e("model llama2-70b has been decommissioned"), failure.ClassModelUnavailable},
		{"unknown model", e("unknown model: claude-9"), failure.ClassModelUnavailable},
		{"context length", e("context_length_exceeded"), failure.ClassContextLength},
		{"too many tokens", e("Too many tokens in prompt"), failure.ClassContextLength},
		{"prompt too long", e("prompt is too long: 210000 tokens > 200000 maximum"), failure.ClassContextLength},
		{"context window", e("input exceeds the context window"), failure.ClassContextLength},
		{"empty response", e("LLM returned an empty response"), failure.ClassEmptyResponse},
		{"no choices", e("no choices in completion"), failure.ClassEmptyResponse},
		{"content filter", e("finish_reason: content_filter"), failure.ClassContentFilter},
		{"safety", e("Response blocked due to SAFETY"), failure.ClassContentFilter},
		{"refusal", e("the model refused to answer"), failure.ClassBadOutput},
		{"refusal, with a status", e("400: the model refused to answer"), failure.ClassContentFilter},
		{"schema", e(`output does not match schema: missing required property "answer"`), failure.ClassBadOutput},
		{"schema, with a status", e(`400 Bad Request: does not match schema`), failure.ClassBadRequest},
		{"parse", e("failed to parse the answer: invalid character 'x' looking for beginning of value"), failure.ClassBadOutput},
		{"json", fmt.Errorf("answer: %w", json.Unmarshal([]byte("{"), new(any))), failure.ClassBadOutput},
		{"marked", failure.BadOutput(errors.New("the summary is empty")), failure.ClassBadOutput},
		{"tool error", e("tool call failed: search_web"), failure.ClassToolError},
		{"function call", e("function call get_weather raised"), failure.ClassToolError},
		// A provider's 400 about tool calls is a bad request, sent once
		// (before: tool_error, retried), and a 413 too large a request.
		{"tool_call_id, with a status", statusErr{400, "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"}, failure.ClassBadRequest},
		{"tool_use, with a status", e("400 invalid_request_error: `tool_use` ids were found without `tool_result` blocks"), failure.ClassBadRequest},
		{"413", statusErr{413, "Request exceeds the maximum allowed number of bytes."}, failure.ClassBadRequest},
		{"tool_use in a provider's body, its status unsaid", rawErr{`POST "https://api.anthropic.com/v1/messages": 400 Bad Request`, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.2: tool_use ids were found without tool_result blocks"}}`}, failure.ClassBadRequest},
		{"request_too_large in a provider's body", rawErr{`POST "https://api.anthropic.com/v1/messages": 413 Request Entity Too Large`, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`}, failure.ClassBadRequest},
		{"panic text without a panic", e("the panic button"), failure.ClassOther},
		{"cancelled text", e("operation was cancelled"), failure.ClassCanceled},
		{"unrelated", e("something odd happened"), failure.ClassOther},
		{"non-ASCII", e("ошибка: превышен лимит"), failure.ClassOther},
		{"non-ASCII with status", e("ошибка HTTP 429"), failure.ClassRateLimit},
		{"empty text", e(""), failure.ClassOther},
		{"secret scrubbed first still classified", e("invalid api_key=sk-abcdefghijklmnopqrstuvwx"), failure.ClassAuth},
	}
}

func TestClassify(t *testing.T) {
	cases := classifyCases()
	if len(cases) < 60 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if got := failure.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

func TestRootCause(t *testing.T) {
	got := map[failure.Class]failure.RootCause{}
	for _, c := range []failure.Class{failure.ClassRateLimit, failure.ClassTimeout, failure.ClassOverloaded, failure.ClassNetwork, failure.ClassAuth,
		failure.ClassBadRequest, failure.ClassNotFound, failure.ClassModelUnavailable, failure.ClassContextLength, failure.ClassEmptyResponse,
		failure.ClassContentFilter, failure.ClassToolError, failure.ClassPanic, failure.ClassCanceled, failure.ClassOther, "billing"} {
		got[c] = c.RootCause()
	}
	want := map[failure.Class]failure.RootCause{
		failure.ClassRateLimit: failure.RootCauseToolFailure, failure.ClassTimeout: failure.RootCauseToolFailure,
		failure.ClassOverloaded: failure.RootCauseToolFailure, failure.ClassNetwork: failure.RootCauseToolFailure,
		failure.ClassAuth: failure.RootCauseToolFailure, failure.ClassModelUnavailable: failure.RootCauseToolFailure,
		failure.ClassToolError: failure.RootCauseToolFailure, failure.ClassCanceled: failure.RootCauseToolFailure,
		failure.ClassBadRequest: failure.RootCauseInstructionAmbiguity, failure.ClassContentFilter: failure.RootCauseInstructionAmbiguity,
		failure.ClassNotFound: failure.RootCauseKnowledgeGap, failure.ClassContextLength: failure.RootCauseContextLoss,
		failure.ClassEmptyResponse: failure.RootCauseReasoningError, failure.ClassPanic: failure.RootCauseReasoningError,
		failure.ClassOther: failure.RootCauseReasoningError, "billing": failure.RootCauseReasoningError,
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
		got := failure.Signature(c.in)
		if got != c.want {
			t.Errorf("Signature(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := failure.Signature(got); again != got {
			t.Errorf("Signature not idempotent on %q: %q", got, again)
		}
	}
	if a, b := failure.ClusterID(failure.Signature("timeout after 30s")), failure.ClusterID(failure.Signature("timeout after 45s")); a != b || len(a) != 16 {
		t.Errorf("cluster IDs %q, %q", a, b)
	}
	// Stable across processes and releases: FNV-1a, a fixed value.
	if got := failure.ClusterID("timeout after <n>s on req <n>"); got != "4cea57989c4c2924" {
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
		{"aws secret key with slashes after the word secret", "AccessDenied: aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY rejected", "AccessDenied: aws secret <redacted> rejected"},
		{"aws secret key with a plus, bare", "signing with wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY.", "signing with <redacted>."},
		{"aws_secret_access_key=", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key=<redacted>"},
		{"AWS_SECRET_ACCESS_KEY= keeps its name", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI1K7MDENG2bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=<redacted>"},
		{"AWS_SECRET_ACCESS_KEY:", "AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY: <redacted>"},
		{"credentials file line", "parse ~/.aws/credentials: aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "parse ~/.aws/credentials: aws_secret_access_key = <redacted>"},
		{"password = with spaces", "bad line: password = hunter2", "bad line: password = <redacted>"},
		{"secret: with / and +", "secret: wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, retry", "secret: <redacted>, retry"},
		{"x-api-key header", "401: X-Api-Key: abc123def456 invalid", "401: X-Api-Key: <redacted> invalid"},
		{"bearer jwt after Authorization", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "Authorization: Bearer <redacted>"},
		{"url password with @", "dial redis://:p@ss@cache:6379 failed", "dial redis://<redacted>@cache:6379 failed"},
		{"query key keeps its name", "GET https://h/v1?key=AIzaSyA1234567890abcdefghijklmnopqrs&alt=json failed", "GET https://h/v1?key=<redacted>&alt=json failed"},
		{"query key and sig", "GET https://h/x?key=abc123&sig=Zm9vYmFy%2Fbaz&sv=2020 failed", "GET https://h/x?key=<redacted>&sig=<redacted>&sv=2020 failed"},
		{"presigned url", "GET https://b.s3.amazonaws.com/o?X-Amz-Signature=deadbeef&Signature=xyz&Expires=1 403", "GET https://b.s3.amazonaws.com/o?X-Amz-Signature=<redacted>&Signature=<redacted>&Expires=1 403"},
		{"a token after a plain key keeps the key", "model=AbCdEf0123456789AbCdEf0123456789xx failed", "model=<redacted> failed"},
		{"key outside a query is a word", "redis: key=selfimprove:memo:abc WRONGTYPE", "redis: key=selfimprove:memo:abc WRONGTYPE"},
		{"a path is no aws key", "open /home/Bob/Projects/app2/data/Cache9/x failed", "open /home/Bob/Projects/app2/data/Cache9/x failed"},
		{"a credentials file's path is no key", "open /root/.aws/credentials: no such file or directory", "open /root/.aws/credentials: no such file or directory"},
		{"a comparison is no key=value", "check password == nil failed", "check password == nil failed"},
		{"the word secret", "secret santa: secret not found", "secret santa: secret not found"},
		{"max_tokens is a count", "max_tokens=4096 too large", "max_tokens=4096 too large"},
		{"a key naming a quantity", "first_token_timeout: attempts 3 → 4", "first_token_timeout: attempts 3 → 4"},
		{"a key naming a kind", "token_type: bearer, access_token: abc123", "token_type: bearer, access_token: <redacted>"},
		{"a secret key whose value has a quantity's name", "refresh_token=timeout42", "refresh_token=<redacted>"},
		{"aws secret key starting with a slash", "SignatureDoesNotMatch: signature mismatch for /K7MDENG/bPxRfiCYEXAMPLEKEYwJalrXUtnFEMI failed", "SignatureDoesNotMatch: signature mismatch for <redacted> failed"},
		{"aws secret key whose only slash leads", "signing with /wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY1, retry", "signing with <redacted>, retry"},
		{"a 40-character path is no aws key", "open /home/Bob/Projects/app2/data/Cache9/wxyz failed", "open /home/Bob/Projects/app2/data/Cache9/wxyz failed"},
		{"an api path stays", "POST /v1/chat/completions: 401", "POST /v1/chat/completions: 401"},
		{"url password with a slash", "dial redis://user:pa/ss@host:6379/0 failed", "dial redis://<redacted>@host:6379/0 failed"},
		{"url password with a slash, https", "GET https://u:p/w@h/path failed", "GET https://<redacted>@h/path failed"},
		{"an @ in a url's path after a port stays", "GET https://h:8443/users/bob@example.com failed", "GET https://h:8443/users/bob@example.com failed"},
		{"bare jwt", "token was eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U rejected", "token was <redacted> rejected"},
		{"bare jwt with long parts", "jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c expired", "jwt <redacted> expired"},
		{"jwt after a plain key", "assertion=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U rejected", "assertion=<redacted> rejected"},
		{"azure subscription key header", "401: Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef invalid", "401: Ocp-Apim-Subscription-Key: <redacted> invalid"},
		{"azure subscription key header, any value", "401: Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcde invalid", "401: Ocp-Apim-Subscription-Key: <redacted> invalid"},
		{"azure subscription key in a query", "GET https://h/x?Ocp-Apim-Subscription-Key=0123456789abcdef0123456789abcde&a=1 failed", "GET https://h/x?Ocp-Apim-Subscription-Key=<redacted>&a=1 failed"},
		{"azure openai api-key header", "401: api-key: 0123456789abcdef0123456789abcdef invalid", "401: api-key: <redacted> invalid"},
		{"an agent's state file in a path", "open /var/lib/si/agents/support-bot_0123456789abcdef0123456789abcdef.json: unexpected EOF", "open /var/lib/si/agents/support-bot_0123456789abcdef0123456789abcdef.json: unexpected EOF"},
		{"hex named like a state file, not in a path", "key support-bot_0123456789abcdef0123456789abcdef.json", "key <redacted>.json"},
		{"hex in a path, no .json", "open /srv/x_0123456789abcdef0123456789abcdef: denied", "open /srv/<redacted>: denied"},
		{"nothing", "connection refused", "connection refused"},
		{"short hex kept", "trace 9f86d081 dropped", "trace 9f86d081 dropped"},
	}
	checkScrub(t, cases)
	if n := testing.AllocsPerRun(100, func() { failure.Scrub("connection refused by upstream host after 3 retries") }); n != 0 {
		t.Errorf("Scrub of a clean text allocates %v times", n)
	}
}

// checkScrub checks that Scrub turns each case's in into its want, and
// that scrubbing that again changes nothing.
func checkScrub(t *testing.T, cases []struct{ name, in, want string }) {
	t.Helper()
	for _, c := range cases {
		got := failure.Scrub(c.in)
		if got != c.want {
			t.Errorf("%s: Scrub(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if again := failure.Scrub(got); again != got {
			t.Errorf("%s: Scrub not idempotent: %q → %q", c.name, got, again)
		}
	}
}
