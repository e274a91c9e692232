package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The example runs with no flags, stops at step 150, resumes to 300, and
// leaves nothing in the temporary directory.
func TestCustomExample(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 300 steps")
	}
	tmp := t.TempDir()
	cmd := exec.Command("go", "run", ".")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"ran to step 150 (checkpoint ckpt/step-00000150), plots 4 files",
		"ran to step 300 (checkpoint ckpt/step-00000300), plots 4 files"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), "step 300  loss 0.00") { // from about 4 at the start
		t.Errorf("the autoencoder did not learn its subspace:\n%s", out)
	}
	if strings.Contains(string(out), " 0 B offloaded") {
		t.Errorf("nothing offloaded:\n%s", out)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "ferry-custom-*"))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
