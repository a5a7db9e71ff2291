package admin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// exactNames checks raw, which decoded into a value of type t, for what
// encoding/json lets through and a strict API refuses: a key that names
// a field only in another case ("SUCCESS" for success: field names are
// case-sensitive), refused as an unknown field, and a null element of an
// array of objects (an outcome that is null), refused naming the
// element. at is raw's path in the body, "" for the body. It returns a
// *badRequest, or nil.
func exactNames(raw []byte, t reflect.Type, at string) error {
	if !suspect(raw) && lowerNames(t) {
		return nil // the walk allocates: most bodies do not need it
	}
	return walkAll(raw, t, at)
}

// walkAll is exactNames without its quick check.
func walkAll(raw []byte, t reflect.Type, at string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := walkNames(dec, t, at, false); err != nil {
		if _, ok := err.(*badRequest); ok {
			return err
		}
		return bad(at, "malformed JSON") // not reached: raw was decoded
	}
	return nil
}

// walkNames checks the next value of dec, of type t (nil: any) at path;
// elem says it is an element of an array.
func walkNames(dec *json.Decoder, t reflect.Type, path string, elem bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tok == nil && elem && t != nil && t.Kind() == reflect.Struct {
		what := strings.ToLower(t.Name())
		return bad(path, "%s is null, and null is not an %s: each must be a JSON object", path, or(what, "object"))
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkNames(dec, et, path+"["+strconv.Itoa(i)+"]", true); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
	}
	return err
}

// walkObject checks the keys and values of an object whose { was read.
func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	var vt reflect.Type // a map's values
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fields = fieldsOf(t)
	case t != nil && t.Kind() == reflect.Map:
		vt = t.Elem()
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if fields != nil {
			var ok bool
			if vt, ok = fields[key]; !ok {
				return wrongCase(path, key, fields)
			}
		}
		if err := walkNames(dec, vt, join(path, key), false); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

// wrongCase refuses key, a key at path that encoding/json took for a
// field of another case.
func wrongCase(path, key string, fields map[string]reflect.Type) error {
	hint := ""
	for name := range fields {
		if strings.EqualFold(name, key) {
			hint = ": did you mean " + strconv.Quote(name) + "?"
			break
		}
	}
	if path != "" {
		return bad(join(path, key), "%s: unknown field %q (field names are case-sensitive%s)", path, key, hint)
	}
	return bad(key, "unknown field %q (field names are case-sensitive%s)", key, hint)
}

// suspect reports whether raw, valid JSON, may hold what exactNames
// refuses: a key with an upper-case letter, a byte outside ASCII or an
// escape (any other key names its field exactly, when every field name
// is lower case, or is refused by encoding/json), or a null element of
// an array. It does not allocate.
func suspect(raw []byte) bool {
	prev := byte(0) // the last byte outside strings and white space
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case ' ', '\t', '\n', '\r':
			continue
		case 'n': // outside strings, only null has an n
			if prev == '[' || prev == ',' { // an element: after a comma, an object has a key
				return true
			}
		case '"':
			odd := false
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				switch b := raw[i]; {
				case b == '\\':
					odd = true
					i++
				case b >= 0x80 || 'A' <= b && b <= 'Z':
					odd = true
				}
			}
			if odd && i < len(raw) && isKey(raw[i+1:]) {
				return true
			}
		}
		prev = raw[min(i, len(raw)-1)]
	}
	return false
}

// isKey reports whether rest, what follows a string, starts with a colon.
func isKey(rest []byte) bool {
	for _, c := range rest {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == ':'
	}
	return false
}

// lowerCache holds lowerNames's answers, by type.
var lowerCache sync.Map // reflect.Type → bool

// lowerNames reports whether every field name of t, of the structs it
// holds too, is free of upper-case letters and bytes outside ASCII.
func lowerNames(t reflect.Type) bool {
	if v, ok := lowerCache.Load(t); ok {
		return v.(bool)
	}
	lower := lowerOf(t, map[reflect.Type]bool{})
	lowerCache.Store(t, lower)
	return lower
}

func lowerOf(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return true
	}
	seen[t] = true
	for name, ft := range fieldsOf(t) {
		if strings.ToLower(name) != name || strings.IndexFunc(name, func(r rune) bool { return r >= 0x80 }) >= 0 || !lowerOf(ft, seen) {
			return false
		}
	}
	return true
}

// fieldCache holds fieldsOf's answers, by struct type.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf returns the JSON names of struct type t's fields, embedded
// structs' included, with their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	addFields(t, m)
	fieldCache.Store(t, m)
	return m
}

func addFields(t reflect.Type, m map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			addFields(f.Type, m)
		case !f.IsExported():
		case name != "":
			m[name] = f.Type
		default:
			m[f.Name] = f.Type
		}
	}
}
