package failure_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/self-improving-loop/selfimprove/failure"
)

// sdkErr is an HTTP error as the Stainless SDKs (openai-go,
// anthropic-sdk-go) give it: the status through a method, the body through
// RawJSON, and a text of the form `POST "url": 429 Too Many Requests {body}`.
type sdkErr struct {
	status int
	raw    string
}

func (e sdkErr) Error() string {
	return fmt.Sprintf("POST \"https://api.example.com/v1/chat/completions\": %d %s", e.status, e.raw)
}
func (e sdkErr) RawJSON() string { return e.raw }
func (e sdkErr) StatusCode() int { return e.status }

// genaiErr is google.golang.org/genai's APIError: no StatusCode method,
// text "Error %d, Message: %s, Status: %s, Details: %v".
type genaiErr struct {
	code            int
	message, status string
}

func (e genaiErr) Error() string {
	return fmt.Sprintf("Error %d, Message: %s, Status: %s, Details: []", e.code, e.message, e.status)
}

// TestProviderBodies: the error bodies of OpenAI, Anthropic, Gemini and
// Vertex, and Azure OpenAI, as their Go SDKs give them, get their class.
// Before: Gemini's per-minute 429 ("You exceeded your current quota ...
// Please retry in 37.2s") was quota, so the call was not retried and the
// agent was held for a day's quota; Gemini's "input token count exceeds
// the maximum number of tokens" was bad_request, never sent to a route
// with a larger window; Anthropic's "You have reached your specified API
// usage limits" was bad_request, not an account-wide quota.
func TestProviderBodies(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want failure.Class
	}{
		// OpenAI
		{"openai 429 rpm", sdkErr{429, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`}, failure.ClassRateLimit},
		{"openai insufficient_quota", sdkErr{429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}, failure.ClassQuota},
		{"openai model_not_found", sdkErr{404, "{\"error\":{\"message\":\"The model `gpt-4.5-preview` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}"}, failure.ClassModelUnavailable},
		{"openai deprecated", sdkErr{404, "{\"error\":{\"message\":\"The model `text-davinci-003` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}"}, failure.ClassModelUnavailable},
		{"openai 500", sdkErr{500, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`}, failure.ClassOverloaded},
		{"openai 503 overloaded", sdkErr{503, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`}, failure.ClassOverloaded},
		{"openai context", sdkErr{400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}, failure.ClassContextLength},
		{"openai invalid key", sdkErr{401, `{"error":{"message":"Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`}, failure.ClassAuth},
		{"openai region", sdkErr{403, `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported","param":null,"type":"request_forbidden"}}`}, failure.ClassAuth},
		{"openai content filter", sdkErr{400, `{"error":{"message":"Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`}, failure.ClassContentFilter},
		// Anthropic
		{"anthropic 529", sdkErr{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, failure.ClassOverloaded},
		{"anthropic 429", sdkErr{429, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (abc) of 50 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}}`}, failure.ClassRateLimit},
		{"anthropic credit", sdkErr{400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`}, failure.ClassQuota},
		{"anthropic usage limit", sdkErr{400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2025-07-01 at 00:00 UTC."}}`}, failure.ClassQuota},
		{"anthropic model 404", sdkErr{404, `{"type":"error","error":{"type":"not_found_error","message":"model: claude-3-opus-20230229"}}`}, failure.ClassModelUnavailable},
		{"anthropic prompt too long", sdkErr{400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215873 tokens > 200000 maximum"}}`}, failure.ClassContextLength},
		{"anthropic 500", sdkErr{500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`}, failure.ClassOverloaded},
		{"anthropic 401", sdkErr{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`}, failure.ClassAuth},
		{"anthropic 403", sdkErr{403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`}, failure.ClassAuth},
		{"anthropic 413", sdkErr{413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`}, failure.ClassBadRequest},
		// Gemini (google.golang.org/genai APIError)
		{"gemini 429 rpm", genaiErr{429, "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, model: gemini-2.0-flash\nPlease retry in 37.2s.", "RESOURCE_EXHAUSTED"}, failure.ClassRateLimit},
		{"gemini daily quota", genaiErr{429, "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. ", "RESOURCE_EXHAUSTED"}, failure.ClassQuota},
		{"gemini 429 old", genaiErr{429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED"}, failure.ClassRateLimit},
		{"gemini 503", genaiErr{503, "The model is overloaded. Please try again later.", "UNAVAILABLE"}, failure.ClassOverloaded},
		{"gemini 500", genaiErr{500, "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", "INTERNAL"}, failure.ClassOverloaded},
		{"gemini 404", genaiErr{404, "models/gemini-1.0-pro is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.", "NOT_FOUND"}, failure.ClassModelUnavailable},
		{"gemini key", genaiErr{400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT"}, failure.ClassAuth},
		{"gemini context", genaiErr{400, "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", "INVALID_ARGUMENT"}, failure.ClassContextLength},
		{"gemini 504", genaiErr{504, "Deadline expired before operation could complete.", "DEADLINE_EXCEEDED"}, failure.ClassOverloaded},
		{"vertex 429", genaiErr{429, "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.", "RESOURCE_EXHAUSTED"}, failure.ClassRateLimit},
		{"vertex quota per minute", genaiErr{429, "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-1.5-pro. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.", "RESOURCE_EXHAUSTED"}, failure.ClassRateLimit},
		// Azure OpenAI
		{"azure 429", sdkErr{429, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}`}, failure.ClassRateLimit},
		{"azure 429 rate", sdkErr{429, `{"error":{"code":"RateLimitReached","message":"Your requests to gpt-4o for gpt-4o in East US have exceeded the call rate limit for your current AIServices S0 pricing tier. Please retry after 12 seconds."}}`}, failure.ClassRateLimit},
		{"azure deployment", sdkErr{404, `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`}, failure.ClassModelUnavailable},
		{"azure 401", sdkErr{401, `{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`}, failure.ClassAuth},
		{"azure content filter", sdkErr{400, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.","type":null,"param":"prompt","code":"content_filter","status":400}}`}, failure.ClassContentFilter},
		{"azure context", sdkErr{400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}`}, failure.ClassContextLength},
		{"azure 500", sdkErr{500, `{"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}}`}, failure.ClassOverloaded},
	}
	for _, c := range cases {
		if got := failure.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestAnthropicMaxTokensTooLargeIsBadRequest: a request whose max_tokens
// the caller must lower (or stream) is bad_request, which the loop does
// not retry: anthropic-sdk-go's own refusal, before any request, of a
// non-streaming request that may take longer than 10 minutes, and the
// API's 400 for max_tokens above the model's output limit. Before: the
// SDK's refusal was other, retried to no end.
func TestAnthropicMaxTokensTooLargeIsBadRequest(t *testing.T) {
	sdkRefusal := errors.New("streaming is required for operations that may take longer than 10 minutes")
	cases := []struct {
		name string
		err  error
	}{
		{"sdk refusal", sdkRefusal},
		{"sdk refusal wrapped", fmt.Errorf("agent step 3: %w", sdkRefusal)},
		{"sdk refusal, older text", errors.New("streaming is strongly recommended for operations that may take longer than 10 minutes")},
		{"python sdk refusal", errors.New("Streaming is strongly recommended for operations that may take longer than 10 minutes. See https://github.com/anthropics/anthropic-sdk-python#long-requests for more details")},
		{"api max_tokens over the model's limit", sdkErr{400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929"}}`}},
		{"api max_tokens over the model's limit, text only", errors.New(`POST "https://api.anthropic.com/v1/messages": 400 Bad Request {"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 8193 > 8192, which is the maximum allowed number of output tokens for claude-3-5-haiku-20241022"}}`)},
	}
	for _, c := range cases {
		if got := failure.Classify(c.err); got != failure.ClassBadRequest {
			t.Errorf("%s: Classify(%q) = %s, want %s", c.name, c.err, got, failure.ClassBadRequest)
		}
	}
}
