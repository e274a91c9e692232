package ferry_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// Imports point one way (docs/design.md, Layout): the CLI and the demo sit on
// top, the training loop knows no dataset or model, devices register
// themselves with device, and autograd knows nothing of offloading. The
// test reads the import graph of every package, tests included.
func TestImportsPointOneWay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	out, err := exec.Command("go", "list", "-json", "-test=false", "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	type pkg struct {
		ImportPath                         string
		Imports, TestImports, XTestImports []string
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	under := func(path, prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	rules := []struct {
		who     func(string) bool
		mayNot  []string
		whyNote string
		tests   bool // the package's tests are held to the rule too
	}{
		{func(p string) bool { return !under(p, "ferry/cmd") }, []string{"ferry/cmd"}, "nothing below the CLI imports it or its demo", true},
		{func(p string) bool { return p == "ferry/train" }, []string{"ferry/data", "ferry/models", "ferry/cmd"}, "the loop knows no dataset or model", true},
		{func(p string) bool { return p == "ferry" }, []string{"ferry/nn", "ferry/offload", "ferry/optim", "ferry/train", "ferry/plan", "ferry/models", "ferry/data"},
			"autograd knows nothing above it (its external tests may)", false},
		{func(p string) bool { return p == "ferry/device" }, []string{"ferry/device/cpu", "ferry/device/meta", "ferry/device/cuda"},
			"devices register themselves; device knows none", false},
		{func(p string) bool { return under(p, "ferry/data") }, []string{"ferry/models", "ferry/train", "ferry/nn"}, "data knows no model", true},
		{func(p string) bool { return p == "ferry/plan" }, []string{"ferry/train", "ferry/models", "ferry/data", "ferry/cmd"}, "the planner depends on nothing above it", false},
	}
	for _, p := range pkgs {
		withTests := append(append(append([]string{}, p.Imports...), p.TestImports...), p.XTestImports...)
		for _, r := range rules {
			if !r.who(p.ImportPath) {
				continue
			}
			all := p.Imports
			if r.tests {
				all = withTests
			}
			for _, imp := range all {
				for _, bad := range r.mayNot {
					if under(imp, bad) && !under(p.ImportPath, bad) {
						t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.whyNote)
					}
				}
			}
		}
	}
}
