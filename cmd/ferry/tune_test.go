package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device/cpu"
	"ferry/internal/blas"
)

func smallTune(extra ...string) []string {
	return append([]string{"tune", "--model", "mlp", "--layers", "2", "--width", "32", "--batch", "8", "--rounds", "2", "--check-rounds", "1"}, extra...)
}

// ferry tune records a step's products, times them, checks whole steps,
// and saves this machine's table where ferry reads it; --dry-run writes
// nothing; a file that is not a table is never overwritten.
func TestTune(t *testing.T) {
	if !blas.Available() {
		_, errOut, code := runCLI(t, smallTune()...)
		if code != 1 || !strings.Contains(errOut, "nothing to choose") {
			t.Errorf("without OpenBLAS: exit %d, %s", code, errOut)
		}
		return
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("FERRY_MATMUL_TABLE", "")
	out, errOut, code := runCLI(t, smallTune("--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r tuneReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// Progress on stderr, stdout one JSON object.
	for _, want := range []string{"tune: recording one training step", "tune: timing", "shapes timed"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	want, _ := cpu.MatmulTablePath()
	if r.SavedTo != want || !strings.HasPrefix(want, cache) {
		t.Errorf("saved to %q, want this machine's table %q under the cache", r.SavedTo, want)
	}
	// Two layers: forward NT twice, input gradient NN once (the first
	// layer's is not needed), weight gradient TN twice.
	calls := map[string]int{}
	for _, c := range r.Shapes {
		calls[c.MatmulShape.String()] = c.Calls
		if !(c.GoSeconds > 0 && c.BLASSeconds > 0) || (c.Library != "go" && c.Library != "openblas") {
			t.Errorf("shape %+v", c)
		}
	}
	if calls["NT 8×32×32"] != 2 || calls["NN 8×32×32"] != 1 || calls["TN 32×32×8"] != 2 || len(calls) != 3 {
		t.Errorf("recorded %v", calls)
	}
	if len(r.StepCheck) != 3 || r.Kept == "" {
		t.Errorf("step check %+v, kept %q", r.StepCheck, r.Kept)
	}
	for _, c := range r.StepCheck {
		if !(c.Seconds > 0) || len(c.All) != 1 {
			t.Errorf("step check %+v", c)
		}
	}
	tab, err := cpu.LoadMatmulTable(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Shapes) != 3 {
		t.Errorf("table holds %d shapes, want 3", len(tab.Shapes))
	}
	before, _ := os.ReadFile(want)

	out, errOut, code = runCLI(t, smallTune("--dry-run")...)
	if code != 0 || !strings.Contains(out, "not saved (--dry-run)") || !strings.Contains(out, "kept: ") {
		t.Errorf("--dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if after, _ := os.ReadFile(want); string(after) != string(before) {
		t.Error("--dry-run changed the table")
	}

	other := filepath.Join(t.TempDir(), "notes.json")
	os.WriteFile(other, []byte(`{"mine": true}`), 0o644)
	_, errOut, code = runCLI(t, smallTune("--save", other)...)
	if code != 1 || !strings.Contains(errOut, "name another file") {
		t.Errorf("--save over a file that is not a table: exit %d, %s", code, errOut)
	}
	if b, _ := os.ReadFile(other); string(b) != `{"mine": true}` {
		t.Errorf("the file was overwritten: %s", b)
	}
	_, errOut, code = runCLI(t, smallTune("--save", filepath.Join(other, "t.json"))...)
	if code != 1 || !strings.Contains(errOut, "tune:") {
		t.Errorf("--save under a file: exit %d, %s", code, errOut)
	}
}

func TestTuneRefusesBadInput(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "--rounds", "0"}, "--rounds must be"},
		{[]string{"tune", "--rounds", "-3"}, "--rounds must be"},
		{[]string{"tune", "--rounds", "x"}, "invalid value"},
		{[]string{"tune", "--check-rounds", "-1"}, "--check-rounds must be"},
		{[]string{"tune", "--model", "nope"}, "--model"},
		{[]string{"tune", "--width", "0"}, "--width"},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("ferry %s: exit %d, %s", strings.Join(c.args, " "), code, errOut)
		}
	}
	// FERRY_MATMUL is read at start: force the library as it does.
	if err := cpu.SetMatmulBackend("go"); err != nil {
		t.Fatal(err)
	}
	defer cpu.SetMatmulBackend("auto")
	if _, errOut, code := runCLI(t, smallTune()...); code != 1 || !strings.Contains(errOut, "unset it to tune") {
		t.Errorf("with FERRY_MATMUL=go: exit %d, %s", code, errOut)
	}
}

// Without OpenBLAS there is nothing to choose: a clear error, no file.
func TestTuneWithoutOpenBLAS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	cache := t.TempDir()
	out, errOut, code := child(t, []string{"FERRY_BLAS=off", "XDG_CACHE_HOME=" + cache}, smallTune()...)
	if code != 1 || !strings.Contains(errOut, "nothing to choose") || !strings.Contains(errOut, "FERRY_BLAS=off") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("left %v in the cache", ents)
	}
}
