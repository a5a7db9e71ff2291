package selfimprove

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The rules are leaves: they reference nothing declared in the files that
// orchestrate the loop. This test type-checks the package and fails on any
// such reference, naming it. (The failure-text stack is a package of its
// own, failure/, where the compiler enforces the wall; see
// TestPackagesPointDown.)
var (
	leafFiles = []string{"tracker.go", "threshold.go", "rollback.go", "rollback_methods.go", "rollback_backstop.go", "breaker.go"}
	// orchestration files: the Loop and its edges, and the state machine.
	orchestration = []string{"loop.go", "call.go", "registry.go", "analysis.go", "persist.go", "operator.go", "filestore.go", "filestore_agents.go",
		"options.go", "state.go", "state_operator.go", "proposal.go", "cluster.go", "memory.go", "strategy.go", "summary.go",
		"notifier.go", "store.go", "ramstore.go", "trace.go", "budget.go", "analyze.go",
		"clock.go", "format.go", "format_decode.go", "format_v1.go", "agent.go", "lifecycle.go", "state_cluster.go", "driver.go"}
)

func TestLeavesStayLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, pkg, info := checkRoot(t)
	bad := map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || obj.Parent() != pkg.Scope() && !isMember(obj) {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if slices.Contains(leafFiles, from) && slices.Contains(orchestration, to) {
			bad[from+" uses "+obj.Name()+" from "+to] = true
		}
	}
	var out []string
	for k := range bad {
		out = append(out, k)
	}
	sort.Strings(out)
	for _, s := range out {
		t.Error(s)
	}
}

// checkRoot type-checks the root package's files from source.
func checkRoot(t *testing.T) (*token.FileSet, *types.Package, *types.Info) {
	t.Helper()
	fset, pkg, info, _ := checkRootFiles(t)
	return fset, pkg, info
}

// checkRootFiles is checkRoot, with the files' syntax. The package is
// type-checked once per test binary (about a second, under -race too),
// and the result shared: its users only read it.
func checkRootFiles(t *testing.T) (*token.FileSet, *types.Package, *types.Info, []*ast.File) {
	t.Helper()
	rootCheck.once.Do(func() { rootCheck.checked = typeCheckRoot() })
	c := &rootCheck.checked
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.fset, c.pkg, c.info, c.files
}

// rootCheck is the root package type-checked (checkRootFiles).
var rootCheck struct {
	once    sync.Once
	checked checkedRoot
}

// checkedRoot is the root package's files type-checked, or why not.
type checkedRoot struct {
	fset  *token.FileSet
	pkg   *types.Package
	info  *types.Info
	files []*ast.File
	err   error
}

// typeCheckRoot type-checks the root package's non-test files from
// source, against its imports' export data (go list -export: the build
// cache's, compiled once per machine). Type-checking the standard library
// from source instead took 20 s under -race on a 2-core machine.
func typeCheckRoot() checkedRoot {
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}", ".").Output()
	if err != nil {
		return checkedRoot{err: fmt.Errorf("go list -export: %w", err)}
	}
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			exports[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("go list -export gave no export data for %q", path)
		}
		return os.Open(file)
	}
	fset := token.NewFileSet()
	matches, err := filepath.Glob("*.go")
	if err != nil {
		return checkedRoot{err: err}
	}
	var files []*ast.File
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, m, nil, parser.SkipObjectResolution)
		if err != nil {
			return checkedRoot{err: err}
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	pkg, err := conf.Check("github.com/self-improving-loop/selfimprove", fset, files, info)
	if err != nil {
		return checkedRoot{err: err}
	}
	return checkedRoot{fset: fset, pkg: pkg, info: info, files: files}
}

// TestOneDriver: what a transition decides is carried out in one place,
// the driver (driver.go). commitLocked (what runs under the agent's lock
// after a transition) and carry (what runs after it) are called from
// driver.go only. A probe's claim, which is part of a save's
// compare-and-set and must run inside it, is an input too (inClaim),
// given by the driver's applyHeld under the save's lock (fleet_notes.go).
func TestOneDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, pkg, info := checkRoot(t)
	allowed := map[string][]string{
		"commitLocked": {"driver.go"},
		"applyHeld":    {"fleet_notes.go"}, // a probe's claim, atomic with its save's Begin
		"carry":        {"driver.go"},
		"stepLocked":   {"driver.go", "operator.go"}, // Approve and Reject find their agent locked
	}
	seen := map[string]bool{}
	for id, obj := range info.Uses {
		files, ok := allowed[obj.Name()]
		if !ok || obj.Pkg() != pkg || !isMember(obj) {
			continue
		}
		seen[obj.Name()] = true
		if from := filepath.Base(fset.Position(id.Pos()).Filename); !slices.Contains(files, from) {
			t.Errorf("%s calls %s: the driver (driver.go) carries out what a transition decides", fset.Position(id.Pos()), obj.Name())
		}
	}
	for name := range allowed {
		if !seen[name] {
			t.Errorf("%s is called nowhere: the test looks for the wrong names", name)
		}
	}
}

// TestFleetStateByInputs: an agent's state, its replication's with it
// (the agent's fleetAgent), changes only in transitions the driver gives
// it (Loop.step; for the flusher's, a commit's and a lease's bookkeeping,
// bookFleetLocked in fleet_commit.go). No method of fleetLink, the
// fleet's side of the driver, writes to it or calls what changes it,
// closures within included, but attach, which makes a new agent's link
// before any call sees it; nor any method of Loop outside the driver's
// own files (driverFiles), but in the transitions it hands the driver
// (driven). Two fields are not state: judging, judge's atomic try-lock
// of the agent's flush, and badAt, when the transport last logged the
// agent's invalid data (fleetWho hands it to the transport). Reads under
// the agent's lock are allowed. What it cannot see: a change made by a
// method of agentState (its transitions: only those of the agent named
// ...Locked, and the replication's, are known as such), or by a plain
// function.
func TestFleetStateByInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, _, info, files := checkRootFiles(t)
	checked := map[string]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Body == nil || fd.Name.Name == "attach" {
				continue
			}
			tv, ok := info.Types[fd.Recv.List[0].Type]
			recv := namedOf(tv.Type)
			file := filepath.Base(fset.Position(fd.Pos()).Filename)
			if !ok || recv != "fleetLink" && (recv != "Loop" || driverFiles[file]) {
				continue
			}
			checked[recv]++
			for _, bad := range stateChanges(info, fd.Body, recv == "fleetLink") {
				t.Errorf("%s: %s.%s %s: give it to the agent's state machine as an input (Loop.step, fleetLink.give)", fset.Position(bad.at), recv, fd.Name.Name, bad.what)
			}
		}
	}
	if checked["fleetLink"] < 30 || checked["Loop"] < 60 {
		t.Errorf("%d methods of fleetLink and %d of Loop checked: the test looks for the wrong receivers", checked["fleetLink"], checked["Loop"])
	}
}

// driverFiles are the driver's own files, whose Loop methods lock an
// agent and change it by hand: the step (driver.go), finding, making
// and evicting an agent (registry.go), and its save (persist.go).
var driverFiles = map[string]bool{"driver.go": true, "registry.go": true, "persist.go": true}

// TestFleetBesideTheCore: the fleet is beside the core, not through it.
// Only the fleet's own files (fleet*.go), the driver's (driverFiles, and
// the Loop's making and closing: loop.go, lifecycle.go; agent.go, whose
// agent holds the replication's state beside its own; waits.go, a
// call's waits on the replication, opened by the driver and the fleet's
// files only) and the files of
// the exported API that name the fleet (fleetAPIFiles) refer to
// anything of the fleet: a name with "fleet" in it, the replication's
// package (internal/replica), or a value, field or method of a type
// that is either. The call path, the state machine, scoring, analysis
// and the operator's methods carry the call's waits (waits) and call
// the driver's hooks (postDead, leaseAnalysis) without knowing a fleet
// is there.
func TestFleetBesideTheCore(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, _, info, _ := checkRootFiles(t)
	fleety := func(tp types.Type) bool {
		s := types.TypeString(tp, nil)
		return strings.Contains(strings.ToLower(s), "fleet") || strings.Contains(s, "internal/replica")
	}
	mentions := map[string]map[string]bool{}
	for id, obj := range info.Uses {
		hit := strings.Contains(strings.ToLower(obj.Name()), "fleet") ||
			obj.Pkg() != nil && strings.HasSuffix(obj.Pkg().Path(), "internal/replica")
		switch o := obj.(type) {
		case *types.Var:
			hit = hit || fleety(o.Type())
		case *types.Func:
			if r := o.Type().(*types.Signature).Recv(); r != nil {
				hit = hit || fleety(r.Type())
			}
		case *types.PkgName:
			hit = hit || strings.HasSuffix(o.Imported().Path(), "internal/replica")
		}
		if !hit {
			continue
		}
		file := filepath.Base(fset.Position(id.Pos()).Filename)
		if mentions[file] == nil {
			mentions[file] = map[string]bool{}
		}
		mentions[file][obj.Name()] = true
	}
	var files []string
	for f := range mentions {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if strings.HasPrefix(f, "fleet") || driverFiles[f] || fleetAPIFiles[f] || f == "loop.go" || f == "lifecycle.go" || f == "agent.go" || f == "waits.go" {
			continue
		}
		var names []string
		for n := range mentions[f] {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("%s refers to the fleet (%s): carry the call's waits, and call the driver's hooks", f, strings.Join(names, ", "))
	}
	t.Logf("%d root files refer to the fleet: %s", len(files), strings.Join(files, " "))
	if len(files) < 10 {
		t.Errorf("only %d files refer to the fleet: the test looks for the wrong names", len(files))
	}
}

// fleetAPIFiles are the files of the exported API that name the fleet:
// its errors, defaults and limits, options, events and metrics (whose
// fleet fields the fleet's own file fills: Loop.replicaMetrics).
var fleetAPIFiles = map[string]bool{"errors.go": true, "limits.go": true, "options.go": true, "eventlevel.go": true,
	"notifier.go": true, "metrics.go": true}

// A stateChange is where code changes an agent's state, and how.
type stateChange struct {
	at   token.Pos
	what string
}

// stateChanges returns the places in body that change an agent's state
// (see TestFleetStateByInputs), and, with pointers, those that hand out
// a pointer into it. The function literals handed to the driver as
// transitions (driven) are not searched.
func stateChanges(info *types.Info, body *ast.BlockStmt, pointers bool) (out []stateChange) {
	reads := map[string]bool{"Owed": true, "Rewrite": true, "Pending": true, "Begin": true, "Load": true}
	skip := driven(info, body)
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			return !skip[x]
		case *ast.AssignStmt:
			for _, e := range x.Lhs {
				if inState(info, e, true) {
					out = append(out, stateChange{e.Pos(), "writes to an agent's state"})
				}
			}
		case *ast.IncDecStmt:
			if inState(info, x.X, true) {
				out = append(out, stateChange{x.Pos(), "writes to an agent's state"})
			}
		case *ast.UnaryExpr:
			if pointers && x.Op == token.AND && inState(info, x.X, true) {
				out = append(out, stateChange{x.Pos(), "hands out a pointer into an agent's state"})
			}
		case *ast.CallExpr:
			sel, ok := x.Fun.(*ast.SelectorExpr)
			if !ok || info.Selections[sel] == nil || info.Selections[sel].Kind() != types.MethodVal {
				break
			}
			_, ptr := info.Selections[sel].Obj().Type().(*types.Signature).Recv().Type().(*types.Pointer)
			switch {
			case ptr && !reads[sel.Sel.Name] && inState(info, sel.X, false):
				out = append(out, stateChange{x.Pos(), "changes an agent's replication (" + sel.Sel.Name + ")"})
			case namedOf(info.Selections[sel].Recv()) == "agent" && strings.HasSuffix(sel.Sel.Name, "Locked"):
				out = append(out, stateChange{x.Pos(), "runs a transition (" + sel.Sel.Name + ")"})
			}
		}
		return true
	})
	return out
}

// driven returns the function literals in body that are handed to the
// driver as transitions: an input's op or undo (inputMore), or an
// operator's setting (Loop.update, Loop.operate, which give it to step
// as an input).
func driven(info *types.Info, body *ast.BlockStmt) map[*ast.FuncLit]bool {
	skip := map[*ast.FuncLit]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CompositeLit:
			if tv, ok := info.Types[x]; !ok || namedOf(tv.Type) != "inputMore" {
				break
			}
			for _, e := range x.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "op" || k.Name == "undo") {
						if f, ok := kv.Value.(*ast.FuncLit); ok {
							skip[f] = true
						}
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := x.Fun.(*ast.SelectorExpr)
			if !ok || info.Selections[sel] == nil || namedOf(info.Selections[sel].Recv()) != "Loop" || sel.Sel.Name != "update" && sel.Sel.Name != "operate" {
				break
			}
			for _, arg := range x.Args {
				if f, ok := arg.(*ast.FuncLit); ok {
					skip[f] = true
				}
			}
		}
		return true
	})
	return skip
}

// inState reports whether e reaches into an agent's state: a field of
// its fleetAgent but judging and badAt, or, for a write, of the agent or
// its agentState.
func inState(info *types.Info, e ast.Expr, write bool) bool {
	switch x := e.(type) {
	case *ast.ParenExpr:
		return inState(info, x.X, write)
	case *ast.StarExpr:
		return inState(info, x.X, write)
	case *ast.IndexExpr:
		return inState(info, x.X, write)
	case *ast.SelectorExpr:
		if sel := info.Selections[x]; sel != nil && sel.Kind() == types.FieldVal {
			switch namedOf(sel.Recv()) {
			case "fleetAgent":
				return x.Sel.Name != "judging" && x.Sel.Name != "badAt"
			case "agent", "agentState":
				if write {
					return true
				}
			}
		}
		return inState(info, x.X, write)
	}
	return false
}

// namedOf is the name of the named type tp, or of the one it points to.
func namedOf(tp types.Type) string {
	if p, ok := tp.(*types.Pointer); ok {
		tp = p.Elem()
	}
	if n, ok := tp.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// isMember reports whether obj is a method or a field: declared by a type
// of the package, it belongs to that type's file.
func isMember(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Type().(*types.Signature).Recv() != nil
	case *types.Var:
		return o.IsField()
	}
	return false
}

// TestPackagesPointDown: the arrows between the module's packages point
// down only. The failure-text stack, the stream reports and the internal
// machinery import nothing of the root package; the root imports none of
// the packages that build on it (admin, notify).
func TestPackagesPointDown(t *testing.T) {
	const mod = "github.com/self-improving-loop/selfimprove"
	rules := map[string][]string{
		".":        {mod + "/admin", mod + "/notify", mod + "/price"},
		"failure":  {mod, mod + "/admin", mod + "/notify"},
		"internal": {mod, mod + "/admin", mod + "/notify"},
		"stream":   {mod, mod + "/admin", mod + "/notify"},
	}
	for dir, banned := range rules {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != dir && (dir == "." || filepath.Base(path) == "testdata") {
					return filepath.SkipDir // "." is the root package alone
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			if strings.HasPrefix(path, filepath.Join("internal", "looptest")) || strings.HasPrefix(path, filepath.Join("internal", "routesim")) ||
				strings.HasPrefix(path, filepath.Join("internal", "streamtest")) || strings.HasPrefix(path, filepath.Join("internal", "oaifake")) {
				return nil // test support that opens Loops: above the root, like notify
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, im := range f.Imports {
				if p, _ := strconv.Unquote(im.Path.Value); slices.Contains(banned, p) {
					t.Errorf("%s imports %s: arrows point down only", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
