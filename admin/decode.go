package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxReason bounds a reason in a request, in bytes.
const maxReason = 512

// badRequest is an input error: the status, the field and the message.
type badRequest struct {
	status int
	field  string
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func bad(field, format string, args ...any) *badRequest {
	return &badRequest{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// RewindRequest is the body of POST /api/agents/{agent}/rewind.
type RewindRequest struct {
	// Version is the config version to install again (see
	// AgentDetail.Versions). Required.
	Version int `json:"version"`
	// Reason says why, at most 512 bytes. Required.
	Reason string `json:"reason"`
	// Author names who asks, at most 128 bytes; it is added to the
	// reason. Optional.
	Author string `json:"author,omitempty"`
	// Verify, default true, verifies the rewound config like any change
	// (it may be rolled back). false installs it as an operator's config
	// (Loop.SetConfig), kept without verification.
	Verify *bool `json:"verify,omitempty"`
}

// ConfigRequest is the body of POST /api/agents/{agent}/config.
type ConfigRequest struct {
	Config ConfigBody `json:"config"`
}

// ConfigBody is a config in a request. Durations are Go duration strings
// ("1.5s"); the version is assigned by the loop.
type ConfigBody struct {
	Timeout     string            `json:"timeout,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Backoff     string            `json:"backoff,omitempty"`
	Route       string            `json:"route,omitempty"`
	Params      map[string]string `json:"params,omitempty"`
	// FirstTokenTimeout is Config.FirstTokenTimeout (at most "1h");
	// default empty: none.
	FirstTokenTimeout string `json:"first_token_timeout,omitempty"`

	given bool // the body had it (UnmarshalJSON): {} is the default config, no "config" a mistake
}

// UnmarshalJSON reads a config of a request body: an unknown field is
// refused, named by its path (config.timeot), and the body is noted to
// have had a config (null is none).
func (c *ConfigBody) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	type plain ConfigBody // without this method
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("json: unknown field %q", "config."+strings.Trim(f, `"`))
		}
		return err
	}
	*c = ConfigBody(p)
	c.given = true
	return nil
}

// required refuses a body without its config.
func (c *ConfigBody) required() error {
	if !c.given {
		return bad("config", "config is required: the config to set ({} for the default one)")
	}
	return nil
}

// ThresholdRequest is the body of POST /api/agents/{agent}/threshold:
// failures (1..64) in window open an analysis, then cooldown. Clear true
// (and no other field) removes the manual threshold.
type ThresholdRequest struct {
	Failures int    `json:"failures,omitempty"`
	Window   string `json:"window,omitempty"`
	Cooldown string `json:"cooldown,omitempty"`
	Clear    bool   `json:"clear,omitempty"`
}

// CriticalRequest is the body of POST /api/agents/{agent}/critical.
type CriticalRequest struct {
	Critical *bool `json:"critical"`
}

// ScoreRequest is the body of POST /api/agents/{agent}/score: a score of
// one call, for graders in other processes (selfimprove.Loop.Score).
type ScoreRequest struct {
	// CallID is the call's ID as selfimprove.Report.CallID gives it: 16
	// hexadecimal digits. Required.
	CallID string `json:"call_id"`
	// Score is in [0, 1]. Required.
	Score *float64 `json:"score"`
	// Key is the score's idempotency key, at most 256 bytes: a score
	// whose key was scored before counts once, so a grader's retry does
	// not count twice. Default empty: none, each score is a sample (the
	// call ID is no key: calls that end in the same millisecond under the
	// same version share one).
	Key string `json:"key,omitempty"`
}

// ApproveRequest is the body of POST /api/proposals/{id}/approve: an
// empty object (or no body).
type ApproveRequest struct{}

// RejectRequest is the body of POST /api/proposals/{id}/reject.
type RejectRequest struct {
	// Reason says why, at most 512 bytes. Required.
	Reason string `json:"reason"`
}

// decode reads one JSON object from r into v: no unknown fields, field
// names as written (exactNames), nothing after it. An empty body, or one
// that is just null, is allowed only when empty is true. Errors are
// *badRequest (413 for a body over the limit). It returns the body, for
// nullNamed.
func decode(r io.Reader, v any, empty bool) ([]byte, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, decodeError(err, empty, "")
	}
	return raw, decodeJSON(raw, v, empty, "")
}

// nullNamed returns err, the refusal of a field of the body raw (a path
// such as "reason", "config.timeout" or "outcomes[3].agent"), saying that
// the field is null when it is: encoding/json reads a null as no value,
// so the check that refused it cannot tell it from a field left out. It
// reads raw again, on this refusal's path only.
func nullNamed(raw []byte, err error) error {
	var br *badRequest
	if !errors.As(err, &br) || br.field == "" || !strings.HasPrefix(br.msg, br.field+" ") {
		return err
	}
	if string(valueAt(raw, br.field)) != "null" {
		return err
	}
	return &badRequest{status: br.status, field: br.field,
		msg: fmt.Sprintf("%s is null; it %s", br.field, strings.TrimPrefix(br.msg, br.field+" "))}
}

// valueAt returns the value at path in raw, a JSON object; nil when raw
// has none there.
func valueAt(raw []byte, path string) json.RawMessage {
	v := json.RawMessage(raw)
	for name := range strings.SplitSeq(path, ".") {
		name, index, indexed := strings.Cut(name, "[")
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) != nil {
			return nil
		}
		v = obj[name]
		if indexed {
			i, err := strconv.Atoi(strings.TrimSuffix(index, "]"))
			var arr []json.RawMessage
			if err != nil || json.Unmarshal(v, &arr) != nil || i < 0 || i >= len(arr) {
				return nil
			}
			v = arr[i]
		}
	}
	return v
}

// decodeJSON decodes raw into v as decode does; at, when not empty, is
// the path of raw in the body (outcomes[3]), and prefixes the fields that
// errors name.
func decodeJSON(raw []byte, v any, empty bool, at string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() || dec.Decode(&struct{}{}) != io.EOF {
			return bad(at, "%s must be one JSON object", or(at, "the body"))
		}
		if !empty && at == "" && bytes.Equal(bytes.TrimSpace(raw), []byte("null")) { // read as no value: say so
			return bad("", "the body is null; it must be a JSON object")
		}
		return exactNames(raw, reflect.TypeOf(v), at)
	}
	return decodeError(err, empty, at)
}

// decodeError turns an error of decoding (a read's, encoding/json's)
// into a *badRequest.
func decodeError(err error, empty bool, at string) error {
	var (
		maxErr  *http.MaxBytesError
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
	)
	switch {
	case errors.As(err, &maxErr):
		return &badRequest{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the body is over %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		if empty {
			return nil
		}
		return bad(at, "%s is empty; it must be a JSON object", or(at, "the body"))
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return bad(at, "%s must be a JSON object", or(at, "the body"))
		}
		return typeError(join(at, typeErr.Field), typeErr)
	case errors.As(err, &synErr):
		return bad(at, "malformed JSON at byte %d", synErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad(at, "malformed JSON: the body ends early")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		if at != "" {
			return bad(join(at, f), "%s: unknown field %q", at, f)
		}
		return bad(f, "unknown field %q", f)
	}
	return bad(at, "malformed JSON")
}

// typeError words a value of the wrong type for field: a number that is
// no whole number where one is due (1.5), or out of the field's range
// (1e30), is a JSON number, and is refused as such.
func typeError(field string, e *json.UnmarshalTypeError) *badRequest {
	num, isNum := strings.CutPrefix(e.Value, "number ")
	if !isNum || e.Type == nil {
		return bad(field, "%s must be a JSON %s", field, typeName(kindOf(e.Type)))
	}
	f, err := strconv.ParseFloat(num, 64)
	switch k := e.Type.Kind(); {
	case err != nil || k == reflect.Float32 || k == reflect.Float64:
		return bad(field, "%s is out of range: %s", field, num)
	case f != math.Trunc(f):
		return bad(field, "%s must be a whole number (an integer), not %s", field, num)
	case k >= reflect.Int && k <= reflect.Int64 && (f < math.MinInt64 || f >= math.MaxInt64 || reflect.New(e.Type).Elem().OverflowInt(int64(f))),
		k >= reflect.Uint && k <= reflect.Uintptr && (f < 0 || f >= math.MaxUint64 || reflect.New(e.Type).Elem().OverflowUint(uint64(f))):
		return bad(field, "%s is out of range: %s", field, num)
	case k >= reflect.Int && k <= reflect.Uintptr:
		return bad(field, "%s must be a whole number written without a fraction or exponent (%.0f), not %s", field, f, num)
	}
	return bad(field, "%s must be a JSON %s", field, typeName(e.Type.Kind().String()))
}

// kindOf is t's kind in Go's words, "" for no type.
func kindOf(t reflect.Type) string {
	if t == nil {
		return ""
	}
	return t.Kind().String()
}

// join is the path of name under at.
func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// typeName names a Go kind in JSON's words.
func typeName(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	case "ptr":
		return "value of the right type"
	}
	return kind
}

// text checks a required or optional text field.
func text(field, s string, max int, required bool) error {
	switch {
	case required && strings.TrimSpace(s) == "":
		return bad(field, "%s is required", field)
	case len(s) > max:
		return bad(field, "%s is over %d bytes", field, max)
	case !utf8.ValidString(s):
		return bad(field, "%s is not UTF-8", field)
	}
	return nil
}

// duration parses an optional Go duration string field.
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, bad(field, "%s: %q is not a duration such as \"1.5s\"", field, s)
	}
	if d < 0 {
		return 0, bad(field, "%s is negative", field)
	}
	return d, nil
}
