package selfimprove_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// movedNames returns the names that the tables of moved and renamed names
// in docs/api.md (those headed "Was" or "before") give in their first
// column and that package selfimprove no longer declares.
func movedNames(t *testing.T, names map[string]bool) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	span := regexp.MustCompile("`([^`]*)`")
	lead := regexp.MustCompile(`^[&(*]*(?:selfimprove\.)?([A-Z][A-Za-z0-9_]*)`)
	gone := map[string]bool{}
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			in = false
			continue
		}
		if h := strings.TrimSpace(cells[1]); h == "Was" || h == "before" {
			in = true
			continue
		}
		for _, m := range span.FindAllStringSubmatch(cells[1], -1) {
			if l := lead.FindStringSubmatch(m[1]); in && l != nil && !names[l[1]] {
				gone[l[1]] = true
			}
		}
	}
	if len(gone) < 20 {
		t.Fatalf("found %d moved names in docs/api.md, want its tables of moved names: %v", len(gone), gone)
	}
	return gone
}

// TestMovedNamesNotInDocs: the package documentation (what go doc and
// pkg.go.dev show) and the user docs do not name as package selfimprove's
// a name that moved out of it (docs/api.md, "Moved and renamed"). Before,
// the package doc sent a newcomer to Scrub, Classify and DefaultStrategy,
// BuiltinStrategy's doc said "DefaultStrategy returns one", and
// docs/analysis.md said "You can call `Scrub(msg)` yourself": none of
// them compiles (they are failure.Scrub, failure.Classify and
// &BuiltinStrategy{}).
func TestMovedNamesNotInDocs(t *testing.T) {
	gone := movedNames(t, rootNames(t))
	word := regexp.MustCompile(`(?:^|[^\w.])([A-Z][A-Za-z0-9_]*)\b`)
	check := func(where, text string) {
		for line := range strings.SplitSeq(text, "\n") {
			for _, m := range word.FindAllStringSubmatch(line, -1) {
				if gone[m[1]] {
					t.Errorf("%s names %s, which is no longer package selfimprove's (see docs/api.md, Moved and renamed): %q", where, m[1], line)
				}
			}
		}
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for name := range goFiles(t, false) {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/self-improving-loop/selfimprove")
	if err != nil {
		t.Fatal(err)
	}
	check("the package doc", p.Doc)
	// go/doc takes each declaration's doc out of its Decl, and leaves the
	// docs of its fields and specs there.
	comments := func(where, text string, decl ast.Node) {
		check(where, text)
		ast.Inspect(decl, func(n ast.Node) bool {
			if g, ok := n.(*ast.CommentGroup); ok {
				check(where, g.Text())
			}
			return true
		})
	}
	for _, v := range slices.Concat(p.Consts, p.Vars) {
		comments("the doc of "+v.Names[0], v.Doc, v.Decl)
	}
	for _, f := range p.Funcs {
		comments("the doc of "+f.Name, f.Doc, f.Decl)
	}
	for _, ty := range p.Types {
		comments("the doc of "+ty.Name, ty.Doc, ty.Decl)
		for _, v := range slices.Concat(ty.Consts, ty.Vars) {
			comments("the doc of "+v.Names[0], v.Doc, v.Decl)
		}
		for _, f := range slices.Concat(ty.Funcs, ty.Methods) {
			comments("the doc of "+ty.Name+"."+f.Name, f.Doc, f.Decl)
		}
	}
	checkPagesForMovedNames(t, gone)
}

// checkPagesForMovedNames reports each name of gone that README.md or a
// page of docs/ writes as package selfimprove's, or as a call a user
// would copy ("`Scrub(msg)`"). docs/api.md lists the old names on purpose.
func checkPagesForMovedNames(t *testing.T, gone map[string]bool) {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile("(?:selfimprove\\.|`)([A-Z][A-Za-z0-9_]*)\\(?")
	for _, page := range append(pages, "README.md") {
		if filepath.Base(page) == "api.md" {
			continue
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range use.FindAllStringSubmatch(line, -1) {
				qualified, call := strings.HasPrefix(m[0], "selfimprove."), strings.HasSuffix(m[0], "(")
				if gone[m[1]] && (qualified || call) {
					t.Errorf("%s:%d: %q names %s as package selfimprove's; it moved (see docs/api.md, Moved and renamed)", page, i+1, m[0], m[1])
				}
			}
		}
	}
}
