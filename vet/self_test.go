package vet

import (
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"
)

// TestFerryIsClean runs the check over ferry itself, tests included, as
// `ferry vet ./...` does: the library must not throw tensors away, and a
// test that discards one on purpose says why with //ferry:discard.
func TestFerryIsClean(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the whole module from source; skipped with -short")
	}
	cfg := &packages.Config{Mode: packages.LoadAllSyntax, Tests: true, Dir: ".."}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("the module does not load; see above")
	}
	graph, err := checker.Analyze([]*analysis.Analyzer{Analyzer}, pkgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for act := range graph.All() {
		if act.Analyzer != Analyzer {
			continue
		}
		for _, d := range act.Diagnostics {
			pos := act.Package.Fset.Position(d.Pos).String()
			if !seen[pos] { // a package and its test variant report alike
				seen[pos] = true
				t.Errorf("%s: %s", pos, d.Message)
			}
		}
	}
}
