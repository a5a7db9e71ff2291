package selfimprove_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestExamplesUsePublicPackages: the package's runnable examples, which
// pkg.go.dev shows with their imports for users to copy, import no
// internal package. Before, ExampleRetryPolicy_jitterSeed used
// internal/fakeclock: a program that copied it did not build ("use of
// internal package not allowed").
func TestExamplesUsePublicPackages(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for name, f := range p.Files {
			examples := false
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
					examples = true
				}
			}
			for _, im := range f.Imports {
				if path := strings.Trim(im.Path.Value, `"`); examples && strings.Contains(path, "/internal/") {
					t.Errorf("%s holds runnable examples and imports %s, which a user's program cannot import", name, path)
				}
			}
		}
	}
}
