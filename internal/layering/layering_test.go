package layering

import (
	"go/build"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/prismd/prismd/"

// forbidden lists, per package (a directory of the module), the module
// packages it must not import, by prefix: docs/architecture.md's arrows
// and "must not touch" column, as imports.
var forbidden = map[string][]string{
	"parser":    {"kulisch", "bitmapfwd", "stream", "engine", "control", "dataplane", "host", "metrics", "deploy", "cmd"},
	"kulisch":   {"parser", "bitmapfwd", "stream", "engine", "control", "dataplane", "host", "metrics", "deploy", "cmd"},
	"bitmapfwd": {"parser", "kulisch", "stream", "engine", "control", "dataplane", "host", "metrics", "deploy", "cmd"},
	"stream":    {"kulisch", "bitmapfwd", "engine", "control", "dataplane", "host", "metrics", "deploy", "cmd"},
	"dataplane": {"kulisch", "bitmapfwd", "stream", "engine", "control", "host", "metrics", "deploy", "cmd"},
	"engine":    {"control", "host", "metrics", "deploy", "cmd"},
	"control":   {"control/am", "control/bitmapam", "host", "metrics", "deploy", "cmd"},
	"metrics":   {"parser", "kulisch", "bitmapfwd", "stream", "engine", "control", "host", "deploy", "cmd"},
	// The rank side never links switch state.
	"host":       {"engine", "control/bitmapam", "dataplane", "metrics", "cmd", "host/bitmap"},
	"control/am": {"engine", "dataplane", "host", "metrics", "stream", "cmd", "control/bitmapam"},
	"deploy":     {"parser", "kulisch", "bitmapfwd", "stream", "engine", "control", "dataplane", "host", "metrics", "cmd"},
}

// TestImportDirections reads every package's imports (go/build, tests
// left out) and fails on an import its entry forbids, or on any package
// that imports a command.
func TestImportDirections(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files (or only tests)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if strings.HasPrefix(dep, "cmd/") && !strings.HasPrefix(rel, "cmd/") {
				t.Errorf("%s imports the command %s", rel, dep)
			}
			for _, bad := range forbidden[rel] {
				if dep == bad || strings.HasPrefix(dep, bad+"/") {
					t.Errorf("%s imports %s: docs/architecture.md has no such arrow (update both, or move the code)", rel, dep)
				}
			}
		}
		checked[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for p := range forbidden {
		if !checked[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("packages %v not found: the rules name packages that moved", missing)
	}
}
