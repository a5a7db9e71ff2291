package admin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzSuspectMissesNothing: the quick check that spares most bodies the
// walk of exactNames never spares one the walk refuses.
func FuzzSuspectMissesNothing(f *testing.F) {
	for _, s := range []string{
		`{"outcomes": [{"agent": "py", "success": true, "duration_ms": 5, "config_version": 1}]}`,
		`{"outcomes": [{"agent": "py", "SUCCESS": true}, null]}`, `{"outcomes": [ null ]}`, `{"outcomes":[{},null]}`,
		`{"outcomes": [{"\u017Fuccess": true, "error": "Rate Limit"}]}`, `{"Outcomes": []}`, `{"outcomes": [{"\u0041gent": "x"}]}`,
	} {
		f.Add(s)
	}
	typ := reflect.TypeOf(&OutcomeBatch{})
	f.Fuzz(func(t *testing.T, body string) {
		raw := []byte(body)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var b OutcomeBatch
		if dec.Decode(&b) != nil || dec.More() {
			return
		}
		if err := walkAll(raw, typ, ""); err != nil && !suspect(raw) {
			t.Fatalf("%q: the walk refuses it (%v), the quick check spares it", body, err)
		}
	})
}

// TestRequestNamesAreLowerCase: the quick check of exactNames holds for
// the request types: their field names are lower case.
func TestRequestNamesAreLowerCase(t *testing.T) {
	for _, v := range []any{&OutcomeBatch{}, &RewindRequest{}, &ConfigRequest{}, &ThresholdRequest{}, &CriticalRequest{},
		&ScoreRequest{}, &ApproveRequest{}, &RejectRequest{}, &TryRequest{}} {
		if !lowerNames(reflect.TypeOf(v)) {
			t.Errorf("%T has a field name that is not lower case: exactNames walks every body", v)
		}
	}
}
