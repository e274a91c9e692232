package train_test

import (
	"os/exec"
	"strings"
	"testing"
)

// maxDeps bounds the packages ferry/train and ferry/nn link, standard
// library and runtime included (go list -deps | wc -l): a library user
// pays for every one in build time and binary size. The standard
// library's json, os and fmt alone are about 70.
const maxDeps = 90

// The training loop and the layers link no plotting library (charts are
// a Plotter the caller attaches, package train/plot), no device backend,
// no dataset or tokenizer, and none of the standard library's heavier
// trees (crypto's FIPS module, regexp): package internal/digest has the
// SHA-256 and CRC-32C the checkpoints record. Directly or through any
// package they import.
func TestTrainLinksNoPlotsNorBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{"ferry/train", "ferry/nn"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s: %q", pkg, out)
		}
		t.Logf("go list -deps %s: %d packages", pkg, len(deps))
		if len(deps) > maxDeps {
			t.Errorf("%s links %d packages, more than %d: %s", pkg, len(deps), maxDeps, strings.Join(deps, " "))
		}
		for _, d := range deps {
			for _, bad := range []string{"gonum.org/", "ferry/trace/plots", "ferry/train/plot", "ferry/device/cpu", "ferry/device/cuda",
				"ferry/data/", "ferry/tokenizer", "ferry/models", "github.com/", "crypto", "regexp", "golang.org/x/"} {
				if d == bad || strings.HasPrefix(d, bad) && (strings.HasSuffix(bad, "/") || d[len(bad)] == '/') {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}
