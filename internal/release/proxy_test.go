package release

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// rootPath is the root module's path; every module of the repository is
// under it.
const rootPath = "github.com/self-improving-loop/selfimprove"

// module is one module of the repository: its path and its directory,
// relative to the repository's root ("." for the root module).
type module struct {
	path, dir string
}

// repo is the repository as a release would see it: its root directory, its
// modules, and the files a commit of the working tree would hold.
type repo struct {
	root    string
	modules []module
	files   []string // slash-separated, relative to root
}

// readRepo lists the repository two directories up: the files git tracks
// or would add (untracked files that .gitignore does not exclude), or every
// file outside .git where git is not installed.
func readRepo(t *testing.T) *repo {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	r := &repo{root: root}
	if err := r.listFiles(); err != nil {
		t.Fatal(err)
	}
	for _, f := range r.files {
		if path.Base(f) != "go.mod" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`).FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s has no module line", f)
		}
		r.modules = append(r.modules, module{path: string(m[1]), dir: path.Dir(f)})
	}
	if len(r.modules) == 0 || r.modules[0].dir != "." || r.modules[0].path != rootPath {
		t.Fatalf("%s: the root module %s not found (modules: %v)", root, rootPath, r.modules)
	}
	return r
}

func (r *repo) listFiles() error {
	if _, err := os.Stat(filepath.Join(r.root, ".git")); err == nil {
		if git, err := exec.LookPath("git"); err == nil {
			cmd := exec.Command(git, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
			cmd.Dir = r.root
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("git ls-files: %w", err)
			}
			for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
				if st, err := os.Lstat(filepath.Join(r.root, filepath.FromSlash(f))); err == nil && st.Mode().IsRegular() {
					r.files = append(r.files, f) // not deleted since, and no link
				}
			}
			slices.SortFunc(r.files, byDepth)
			r.files = slices.Compact(r.files)
			return nil
		}
	}
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(r.root, p)
			if err != nil {
				return err
			}
			r.files = append(r.files, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.SortFunc(r.files, byDepth)
	return err
}

// byDepth sorts paths by the number of their directories, then by name, so
// that the root module's go.mod comes first.
func byDepth(a, b string) int {
	if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// owner is the module whose zip holds file f: the innermost module
// directory above it. The second result is false for a file no module
// zip holds (in a vendor directory, or a VCS directory).
func (r *repo) owner(f string) (module, bool) {
	for dir := range strings.SplitSeq(path.Dir(f), "/") {
		if dir == "vendor" || dir == ".git" || dir == ".hg" || dir == ".svn" || dir == ".bzr" {
			return module{}, false
		}
	}
	best := r.modules[0]
	for _, m := range r.modules[1:] {
		if strings.HasPrefix(f, m.dir+"/") && len(m.dir) > len(best.dir) {
			best = m
		}
	}
	return best, true
}

// ownRequire matches a requirement, in a go.mod, of one of this
// repository's modules: a line of a require block or a require directive.
var ownRequire = regexp.MustCompile(`(?m)^(\s*(?:require\s+)?` + regexp.QuoteMeta(rootPath) + `(?:/\S+)?\s+)v\S+`)

// releaseGoMod is the go.mod a release at version would publish: the
// requirements of this repository's modules set to that version, as the
// release steps do (docs/operations.md). Replace directives stay: a release
// publishes what is committed.
func releaseGoMod(goMod []byte, version string) []byte {
	return ownRequire.ReplaceAll(goMod, []byte("${1}"+version))
}

// buildProxy writes a module proxy (the GOPROXY protocol's file layout)
// holding every module of the repository at each of the versions: for each,
// the zip (files under "<module>@<version>/", without the subtrees of nested
// modules, vendor and VCS directories), the .mod, the .info and the list.
func buildProxy(t *testing.T, r *repo, dir string, versions ...string) {
	t.Helper()
	for _, m := range r.modules {
		if m.path != strings.ToLower(m.path) {
			t.Fatalf("%s: a module path with capitals needs escaping, which this proxy does not do", m.path)
		}
		vdir := filepath.Join(dir, filepath.FromSlash(m.path), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		goMod, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(m.dir), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range versions {
			mod := releaseGoMod(goMod, v)
			zipped, err := r.zipModule(m, v, mod)
			if err != nil {
				t.Fatalf("zip of %s@%s: %v", m.path, v, err)
			}
			info := fmt.Sprintf(`{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, v)
			for name, data := range map[string][]byte{v + ".zip": zipped, v + ".mod": mod, v + ".info": []byte(info)} {
				if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// zipModule zips module m's files at version, its go.mod replaced by goMod.
func (r *repo) zipModule(m module, version string, goMod []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefix := m.path + "@" + version + "/"
	for _, f := range r.files {
		if o, ok := r.owner(f); !ok || o != m {
			continue
		}
		rel := f
		if m.dir != "." {
			rel = strings.TrimPrefix(f, m.dir+"/")
		}
		data := goMod
		if rel != "go.mod" {
			var err error
			if data, err = os.ReadFile(filepath.Join(r.root, filepath.FromSlash(f))); err != nil {
				return nil, err
			}
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: prefix + rel, Method: zip.Deflate, Modified: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
