package train_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The training loop links no plotting library (charts are a Plotter the
// caller attaches, package train/plot) and no device backend, directly or
// through any package it imports.
func TestTrainLinksNoPlotsNorBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "ferry/train").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps ferry/train: %q", out)
	}
	for _, d := range deps {
		for _, bad := range []string{"gonum.org/", "ferry/trace/plots", "ferry/train/plot", "ferry/device/cpu", "ferry/device/cuda"} {
			if d == bad || strings.HasPrefix(d, bad) && (strings.HasSuffix(bad, "/") || d[len(bad)] == '/') {
				t.Errorf("ferry/train depends on %s", d)
			}
		}
	}
}
