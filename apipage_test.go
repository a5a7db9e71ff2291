package selfimprove_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// goFiles parses the root package's Go files: its test files when tests
// is set, else the others, keyed by name.
func goFiles(t *testing.T, tests bool) map[string]*ast.File {
	t.Helper()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".go") && strings.HasSuffix(n, "_test.go") == tests {
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files[n] = f
		}
	}
	return files
}

// rootNames returns the names the root package declares, from its
// source: its top-level names, and the names of its methods and struct
// fields (which the API page names as Type.Name or (*Type).Name).
func rootNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, f := range goFiles(t, false) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				names[n.Name.Name] = true
			case *ast.TypeSpec:
				names[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			}
			return true
		})
	}
	return names
}

// TestAPIPageNamesExist: each name docs/api.md lists bare in its table
// of names is package selfimprove's (go doc selfimprove.<Name> finds
// it). Before, the page still listed Classify, Signature, ClusterID,
// Scrub, Sleeper and APIError, which had moved to package failure (or
// became a method of Clock): a newcomer's code did not compile.
func TestAPIPageNamesExist(t *testing.T) {
	b, err := os.ReadFile("docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	names := rootNames(t)
	span := regexp.MustCompile("`([^`]*)`")
	lead := regexp.MustCompile(`^[&(*]*([A-Za-z_][A-Za-z0-9_]*)(\.?)`)
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| Names |") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if !in || len(cells) < 3 {
			continue
		}
		for _, m := range span.FindAllStringSubmatch(cells[1], -1) {
			l := lead.FindStringSubmatch(m[1])
			if l == nil || l[1] == "" || l[1][0] < 'A' || l[1][0] > 'Z' {
				continue // another package's (notify., failure., admin.), or not a name
			}
			if !names[l[1]] {
				t.Errorf("docs/api.md:%d: %q names %s, which package selfimprove does not declare", i+1, m[1], l[1])
			}
		}
	}
}
