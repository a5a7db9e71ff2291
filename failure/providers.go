package failure

import (
	"encoding/json"
	"strings"
)

// ClassQuota is a failure for lack of credit or quota on the provider's
// account (OpenAI's insufficient_quota, Anthropic's billing_error, "your
// credit balance is too low"): unlike a rate limit, waiting does not
// help, so the loop does not retry it by default.
const ClassQuota Class = "quota"

// maxProviderJSON bounds the raw provider body Classify parses, in bytes:
// a longer one is left to the error's text.
const maxProviderJSON = 64 << 10

// rawJSONOf returns the raw provider body e exposes through a method
// RawJSON() string (the Stainless-generated SDKs: openai-go,
// anthropic-sdk-go), or "".
func rawJSONOf(e error) string {
	if x, ok := e.(interface{ RawJSON() string }); ok {
		return x.RawJSON()
	}
	return ""
}

// ProviderError is what a provider's error body says, as
// ProviderErrorOf reads it.
type ProviderError struct {
	// Code is the provider's error code ("model_not_found",
	// "context_length_exceeded"); default empty when the body has none.
	Code string
	// Type is the provider's error type ("invalid_request_error",
	// "overloaded_error"); default empty when the body has none.
	Type string
	// Message is the provider's message; default empty when the body has
	// none.
	Message string
}

// ProviderErrorOf reads the provider's error body of the first error in
// err's chain with a method RawJSON() string: OpenAI's
// {"error":{"message","type","param","code"}} (or its inner object, as
// openai-go keeps it) and Anthropic's
// {"type":"error","error":{"type","message"}}. ok is false when there is
// no such error, or its body is not JSON, or longer than 64 KiB.
func ProviderErrorOf(err error) (p ProviderError, ok bool) {
	defer func() {
		if recover() != nil {
			p, ok = ProviderError{}, false
		}
	}()
	var raw string
	Walk(err, func(e error) bool {
		raw = rawJSONOf(e)
		return raw == ""
	})
	return parseProviderJSON(raw)
}

// parseProviderJSON reads a provider's error body; see ProviderErrorOf.
func parseProviderJSON(raw string) (p ProviderError, ok bool) {
	if raw == "" || len(raw) > maxProviderJSON {
		return p, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &top) != nil {
		return p, false
	}
	if e, has := top["error"]; has {
		var inner map[string]json.RawMessage
		if json.Unmarshal(e, &inner) == nil {
			top = inner
		} else {
			p.Message = jsonText(e)
		}
	}
	p.Code, p.Type = jsonText(top["code"]), jsonText(top["type"])
	if p.Message == "" {
		p.Message = jsonText(top["message"])
	}
	return p, p.Code != "" || p.Type != "" || p.Message != ""
}

// jsonText returns a JSON string's value, a number's literal, the
// strings of an array joined with ", ", or "".
func jsonText(m json.RawMessage) string {
	if len(m) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var f json.Number
	if json.Unmarshal(m, &f) == nil {
		return f.String()
	}
	var ss []string
	if json.Unmarshal(m, &ss) == nil {
		return strings.Join(ss, ", ")
	}
	return ""
}

// providerCodes are the provider codes and types that name their class
// outright, whatever the message says.
var providerCodes = map[string]Class{
	// OpenAI codes.
	"rate_limit_exceeded":          ClassRateLimit,
	"insufficient_quota":           ClassQuota,
	"billing_hard_limit_reached":   ClassQuota,
	"model_not_found":              ClassModelUnavailable,
	"deploymentnotfound":           ClassModelUnavailable,
	"context_length_exceeded":      ClassContextLength,
	"content_filter":               ClassContentFilter,
	"content_policy_violation":     ClassContentFilter,
	"responsibleaipolicyviolation": ClassContentFilter,
	"invalid_api_key":              ClassAuth,
	"invalid_organization":         ClassAuth,
	"server_error":                 ClassOverloaded,
	"engine_overloaded":            ClassOverloaded,
	// Anthropic types.
	"rate_limit_error":     ClassRateLimit,
	"overloaded_error":     ClassOverloaded,
	"api_error":            ClassOverloaded,
	"authentication_error": ClassAuth,
	"permission_error":     ClassAuth,
	"billing_error":        ClassQuota,
	"timeout_error":        ClassTimeout,
	"request_too_large":    ClassBadRequest, // 413: over the request's byte limit; no retry or model fixes it
}

// providerClass classifies a provider's error body raw, with text the
// error's own text and status the HTTP status the error reported through
// a method (0 for none): a code or type in providerCodes names the class;
// otherwise the type, code and message are read with the error's text (a
// status in it counts, and a specific phrase of the message beats it).
// It returns "" when there is no body or it says nothing Classify can
// place.
func providerClass(raw, text string, status int) Class {
	p, ok := parseProviderJSON(raw)
	if !ok {
		return ""
	}
	for _, k := range [...]string{p.Code, p.Type} {
		if c, ok := providerCodes[strings.ToLower(k)]; ok {
			return c
		}
	}
	msg := p.Message
	if len(msg) > maxProviderMessage {
		msg = msg[:cutAt(msg, maxProviderMessage)]
	}
	if status == 0 {
		// The body is an HTTP error response's, whose status the error
		// does not report: a text rule for a text without one (a tool's
		// failure, a bad output) does not apply to it.
		status = -1
	}
	if c := classifyText(p.Type+" "+p.Code+" "+msg+" "+text, status); c != ClassOther {
		return c
	}
	return ""
}

// maxProviderMessage is how much of a provider's message providerClass
// reads, in bytes.
const maxProviderMessage = 512
