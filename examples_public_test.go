package selfimprove_test

import (
	"go/ast"
	"strings"
	"testing"
)

// TestExamplesUsePublicPackages: the package's runnable examples, which
// pkg.go.dev shows with their imports for users to copy, import no
// internal package. Before, ExampleRetryPolicy_jitterSeed used
// internal/fakeclock: a program that copied it did not build ("use of
// internal package not allowed").
func TestExamplesUsePublicPackages(t *testing.T) {
	{
		for name, f := range goFiles(t, true) {
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
