package fsx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// readAllowed are the reads outside fsx.Open that are not of a user's
// file, keyed by file (slash-separated, from the module root) and the
// call, each with its reason. Anything else that opens a file for reading
// must go through Open (or ReadFile, ReadLimited), which refuses FIFOs,
// devices and link loops before blocking and can be interrupted.
var readAllowed = map[string]string{
	"internal/fsx/fsx.go os.Open":                     "a directory opened to fsync it after a rename",
	"internal/fsx/open.go syscall.Open":               "Open itself",
	"train/checkpoint.go os.Open":                     "syncDir: a directory opened to fsync it",
	"models/export.go os.Open":                        "syncDir: a directory opened to fsync it",
	"train/log.go os.OpenFile":                        "the run's log, opened for writing (its flags are in a variable)",
	"internal/rss/rss.go os.Open":                     "/proc/self/status, the kernel's",
	"device/cpu/cpu.go os.ReadFile":                   "/proc/meminfo, the kernel's",
	"device/cpu/matmultable.go os.Open":               "/proc/cpuinfo, the kernel's",
	"device/cuda/cu/load.go os.Open":                  "/proc/self/maps, the kernel's",
	"device/cuda/kernels/ptxsum.go os.ReadFile":       "go generate: the kernels' own sources",
	"device/cuda/internal/ptxsum/main.go os.ReadFile": "go generate: the kernels' own sources",
	"device/cuda/standin/kernels.go os.ReadFile":      "a file the stand-in's compiler just wrote in its own temporary directory",
}

// readCalls are the calls that open a file for reading; os.OpenFile and
// the raw opens count only without a write flag among their arguments.
var readCalls = map[string]bool{
	"os.Open": true, "os.ReadFile": true, "ioutil.ReadFile": true, "os.OpenFile": true,
	"syscall.Open": true, "unix.Open": true, "unix.Openat": true, "os.DirFS": true, "os.OpenInRoot": true,
}

var writeFlags = []string{"O_WRONLY", "O_RDWR", "O_CREATE", "O_CREAT", "O_APPEND", "O_TRUNC", "O_TMPFILE"}

// No file is opened for reading except through Open: the test parses
// every non-test Go file of the module and lists each read call that
// readAllowed does not name.
func TestNoOtherReadPath(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var bad []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			fn := pkg.Name + "." + sel.Sel.Name
			if !readCalls[fn] {
				return true
			}
			if strings.HasSuffix(fn, "Open") || strings.HasSuffix(fn, "OpenFile") || strings.HasSuffix(fn, "Openat") {
				if fn != "os.Open" && writes(call) {
					return true
				}
			}
			key := rel + " " + fn
			if _, ok := readAllowed[key]; ok {
				seen[key] = true
				return true
			}
			bad = append(bad, fset.Position(call.Pos()).String()+": "+fn)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("%s opens a file for reading outside fsx.Open (use fsx.Open, fsx.ReadFile or fsx.ReadLimited, or add it to readAllowed with its reason)", b)
	}
	for k := range readAllowed {
		if !seen[k] {
			t.Errorf("readAllowed names %q, which no longer reads: drop it", k)
		}
	}
}

// writes says whether an open call's arguments name a write flag.
func writes(call *ast.CallExpr) bool {
	found := false
	for _, a := range call.Args[1:] {
		ast.Inspect(a, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				for _, w := range writeFlags {
					if id.Name == w {
						found = true
					}
				}
			}
			return true
		})
	}
	return found
}
