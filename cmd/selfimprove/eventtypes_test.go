package main

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"slices"
	"strconv"
	"testing"
)

// TestKnownEventTypesAreTheLibrarys: events --type takes every event type
// the library declares (notifier.go), and no other.
func TestKnownEventTypesAreTheLibrarys(t *testing.T) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "../../notifier.go", nil, 0)
	if err != nil {
		t.Skipf("the library's source: %v", err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != gotoken.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "EventType" {
				continue
			}
			for _, val := range v.Values {
				if lit, ok := val.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					declared = append(declared, s)
				}
			}
		}
	}
	var known []string
	for _, k := range knownEventTypes {
		known = append(known, string(k))
	}
	slices.Sort(declared)
	slices.Sort(known)
	if len(declared) == 0 || !slices.Equal(declared, known) {
		t.Errorf("events --type takes %q; the library declares %q", known, declared)
	}
}
