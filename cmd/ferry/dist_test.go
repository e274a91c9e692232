package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mpirun -np 2 ferry train text at --batch 4 trains as one process at
// --batch 8, dropout on (each rank draws the masks one process draws for
// its rows): the same losses up to float32 rounding of the reduction, with
// the ranks' parameters checked bit-identical after every step
// (--check-every 1), and only rank 0 writing.
func TestTrainTextOnTwoMPIRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ferry and starts mpirun")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("Open MPI is absent (no mpirun on PATH); install the libopenmpi3 and openmpi-bin packages to run this test")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := corpus(t)
	dp, sp := filepath.Join(dir, "dp.jsonl"), filepath.Join(dir, "sp.jsonl")
	args := func(batch, log string) []string {
		a := smallText(data, "--steps", "12", "--log", log, "--json", "--check-every", "1", "--dropout", "0.1")
		a[13] = batch // --batch
		return a
	}
	cmd := exec.Command(mpirun, append([]string{"--oversubscribe", "--allow-run-as-root", "-np", "2", bin}, args("4", dp)...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s%s", err, out, stderr.String())
	}
	var sum struct {
		WorldSize int `json:"world_size"`
		Steps     int `json:"steps"`
	}
	if err := json.Unmarshal(out, &sum); err != nil || sum.WorldSize != 2 || sum.Steps != 12 {
		t.Fatalf("stdout is not rank 0's one summary of 2 ranks: %v\n%s", err, out)
	}
	if _, errOut, code := runCLI(t, args("8", sp)...); code != 0 {
		t.Fatalf("one process: %s", errOut)
	}
	a, b := logLosses(t, dp), logLosses(t, sp)
	var worst float64
	for step, l := range b {
		worst = max(worst, math.Abs(a[step]-l))
	}
	t.Logf("12 steps, largest loss difference between 2 ranks at batch 4 and 1 process at batch 8: %.3g", worst)
	if len(a) != 12 || worst > 1e-5 {
		t.Errorf("2 ranks %v\n1 process %v", a, b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 { // the binary and the two logs: rank 1 wrote nothing
		t.Errorf("files: %v", ents)
	}
}
