package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testVersion is the version the install test publishes every module at:
// not the release version the go.mod files name, so that the test also
// checks that a release rewrites them.
const testVersion = "v0.1.1-test"

// userModules are the modules a user installs: the root, the CLI and the
// adapters. (e2e and benchmarks/compare are the repository's own.)
func userModules(r *repo) []module {
	var ms []module
	for _, m := range r.modules {
		if m.dir != "e2e" && !strings.HasPrefix(m.dir, "benchmarks/") {
			ms = append(ms, m)
		}
	}
	return ms
}

// goEnv is the environment of a user with nothing of this repository: a
// fresh GOPATH and module cache under home, no workspace, no GOFLAGS, and as
// module proxies the one built from the repository (proxy), then this
// machine's module cache (so that third-party modules resolve offline),
// then the proxies this machine uses. Checksums are not verified: the
// test's versions are known to no checksum database. The build cache is
// shared (-trimpath keeps its entries valid across module caches).
func goEnv(goBin, proxy, home string) ([]string, error) {
	var vars [3]string
	for i, name := range []string{"GOMODCACHE", "GOCACHE", "GOPROXY"} {
		out, err := exec.Command(goBin, "env", name).Output()
		if err != nil {
			return nil, fmt.Errorf("go env %s: %w", name, err)
		}
		vars[i] = strings.TrimSpace(string(out))
	}
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(vars[0], "cache", "download"))
	if vars[2] != "" && vars[2] != "off" {
		proxies += "," + vars[2]
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GO") || strings.HasPrefix(kv, "GOROOT=") || strings.HasPrefix(kv, "GOEXPERIMENT=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOENV=off", "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw -trimpath",
		"GOPATH="+filepath.Join(home, "gopath"), "GOMODCACHE="+filepath.Join(home, "gopath", "pkg", "mod"),
		"GOBIN="+filepath.Join(home, "bin"), "GOCACHE="+vars[1], "GOPROXY="+proxies, "GOSUMDB=off"), nil
}

// fixture is what both tests share, made once: the repository, a proxy of
// it at the release version and at testVersion, and a user's environment
// whose module cache both fill (extracting the third-party modules once).
type fixture struct {
	repo    *repo
	release string // the version the nested modules require
	home    string
	env     []string
}

var (
	shared     fixture
	sharedOnce sync.Once
	sharedDir  string // removed by TestMain
)

// requires finds a go.mod's requirement of the root module.
var requires = regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(rootPath) + `\s+(v\S+)`)

func setUp(t *testing.T, goBin string) *fixture {
	t.Helper()
	sharedOnce.Do(func() {
		r := readRepo(t)
		data, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(r.modules[1].dir), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		m := requires.FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s/go.mod does not require %s", r.modules[1].dir, rootPath)
		}
		if sharedDir, err = os.MkdirTemp("", "release"); err != nil {
			t.Fatal(err)
		}
		proxy := filepath.Join(sharedDir, "proxy")
		buildProxy(t, r, proxy, string(m[1]), testVersion)
		env, err := goEnv(goBin, proxy, sharedDir)
		if err != nil {
			t.Fatal(err)
		}
		shared = fixture{repo: r, release: string(m[1]), home: sharedDir, env: env}
	})
	if shared.env == nil {
		t.Fatal("setting up the proxy failed in an earlier test")
	}
	return &shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir) // the module cache is writable: -modcacherw
	}
	os.Exit(code)
}

// goTool is the go command, or a skip (a failure under CI=true) without one.
func goTool(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no go command in PATH: %v", err)
		}
		t.Skipf("no go command in PATH (install Go from https://go.dev/dl): %v", err)
	}
	return goBin
}

// run runs the go command in dir and fails the test with its output if it
// fails.
func run(t *testing.T, goBin, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := commandContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, env, 10*time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// alone are the modules that cannot be built into one program with the
// others: genkit's dotprompt needs github.com/invopop/jsonschema v0.13, the
// Anthropic SDK v0.14, whose ordered maps differ.
var alone = []string{"integrations/genkit"}

// commandContext bounds a go command by the test's deadline, less a
// minute: cold, on a busy 2-core machine, a build here takes minutes (the
// OpenAI SDK alone), and a command still running when the test binary
// times out would outlive it.
func commandContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(t.Context(), d.Add(-time.Minute))
	}
	return context.WithCancel(t.Context())
}

// TestInstallFromProxy publishes every module at testVersion in a module
// proxy built from the working tree, then, as a user with a fresh module
// cache: gets the root and the adapters into a new module and builds a
// program importing them (one with every adapter, one with each of alone),
// and installs the CLI with go install …/cmd/selfimprove@version and runs
// it.
func TestInstallFromProxy(t *testing.T) {
	goBin := goTool(t)
	f := setUp(t, goBin)
	programs := map[string][]module{}
	for _, m := range userModules(f.repo) {
		switch {
		case m.dir == "." || m.dir == "cmd/selfimprove":
		case slices.Contains(alone, m.dir):
			programs[m.dir] = append(programs[m.dir], m)
		default:
			programs["adapters"] = append(programs["adapters"], m)
		}
	}
	for name, mods := range programs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			imports := fmt.Sprintf("\t_ %q\n", rootPath)
			get := []string{"get", rootPath + "@" + testVersion}
			for _, m := range mods {
				imports += fmt.Sprintf("\t_ %q\n", m.path)
				get = append(get, m.path+"@"+testVersion)
			}
			files := map[string]string{
				"go.mod":  "module example.com/user\n\ngo 1.26.0\n",
				"main.go": "package main\n\nimport (\n" + imports + ")\n\nfunc main() {}\n",
			}
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			run(t, goBin, dir, f.env, get...)
			run(t, goBin, dir, f.env, "build", "-o", filepath.Join(dir, "user"), ".")
			for _, m := range append(mods, module{path: rootPath}) {
				if got := strings.TrimSpace(run(t, goBin, dir, f.env, "list", "-m", m.path)); got != m.path+" "+testVersion {
					t.Errorf("the program builds with %q, want %s %s", got, m.path, testVersion)
				}
			}
		})
	}

	t.Run("cmd/selfimprove", func(t *testing.T) {
		dir := t.TempDir() // outside any module
		run(t, goBin, dir, f.env, "install", rootPath+"/cmd/selfimprove@"+testVersion)
		bin := filepath.Join(f.home, "bin", "selfimprove")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "help").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("selfimprove")) {
			t.Fatalf("%s help: %v\n%s", bin, err, out)
		}
	})
}

// TestNestedModulesTidy checks that each nested module's go.mod and go.sum
// are what go mod tidy makes of them, outside the workspace, against the
// root module at the version they require (published from the working
// tree): the check a release's tidy would do. The root's own checksum
// lines are not compared: they change with every commit until the tag.
// It also checks that every nested module requires the root at one
// version, and that go.work's replace names it.
func TestNestedModulesTidy(t *testing.T) {
	goBin := goTool(t)
	f := setUp(t, goBin)
	r := f.repo
	for _, m := range r.modules[1:] {
		data, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(m.dir), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^replace\b`).Match(data) {
			t.Errorf("%s/go.mod has a replace directive: go install %s@version refuses it", m.dir, m.path)
		}
		got := "no version"
		if m := requires.FindSubmatch(data); m != nil {
			got = string(m[1])
		}
		if got != f.release {
			t.Errorf("%s/go.mod requires %s at %s, %s at %s", m.dir, rootPath, got, r.modules[1].dir, f.release)
		}
	}
	work, err := os.ReadFile(filepath.Join(r.root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	if line := "replace " + rootPath + " " + f.release + " => ./"; !bytes.Contains(work, []byte(line)) {
		t.Errorf("go.work lacks %q: the workspace cannot read the root's go.mod at %s", line, f.release)
	}

	for _, m := range r.modules[1:] {
		t.Run(m.dir, func(t *testing.T) {
			ctx, cancel := commandContext(t)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "mod", "tidy", "-diff")
			cmd.Dir, cmd.Env, cmd.WaitDelay = filepath.Join(r.root, filepath.FromSlash(m.dir)), f.env, 10*time.Second
			out, err := cmd.CombinedOutput()
			if err == nil {
				return
			}
			for line := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n"), "\n") {
				own := strings.HasPrefix(line, "+"+rootPath+" ") || strings.HasPrefix(line, "-"+rootPath+" ")
				header := strings.HasPrefix(line, "+++ ") || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "@@ ") || strings.HasPrefix(line, "diff ")
				if !own && !header && line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "go: downloading ") {
					t.Fatalf("%s is not tidy (fix: cd %s && GOWORK=off GOPROXY=<this test's proxy> go mod tidy), at %q; go mod tidy -diff: %v\n%s", m.dir, m.dir, line, err, out)
				}
			}
		})
	}
}
