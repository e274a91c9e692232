package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A run of several ranks says how many, that --batch is per rank, and the
// global batch, in its header and its summary; one rank says nothing of
// ranks.
func TestRanksNoteAndSummary(t *testing.T) {
	if got := ranksNote(1, 16, 1, "tokens"); got != "" {
		t.Errorf("one rank: %q", got)
	}
	want := "data-parallel over 4 ranks (mpirun): --batch 16 is per rank, a global batch of 4 × 16 = 64 sequences per micro-batch, 128 per step with --accum 2"
	if got := ranksNote(4, 16, 2, "tokens"); got != want {
		t.Errorf("4 ranks:\n got %q\nwant %q", got, want)
	}
	var b strings.Builder
	printSummary(&b, &trainSummary{Device: "cpu", Mode: "none", Optimizer: "adamw", WorldSize: 4, Batch: 16, GlobalBatch: 64}, "tokens")
	if !strings.Contains(b.String(), "on 4 ranks (cpu each; global batch 4 × 16 = 64)") {
		t.Errorf("summary of 4 ranks:\n%s", b.String())
	}
	b.Reset()
	printSummary(&b, &trainSummary{Device: "cpu", Mode: "none", Optimizer: "adamw", WorldSize: 1, Batch: 16, GlobalBatch: 16}, "tokens")
	if strings.Contains(b.String(), "rank") {
		t.Errorf("summary of one rank mentions ranks:\n%s", b.String())
	}
}

// Under mpirun -np 2, the human output (rank 0's) says 2 ranks ran and
// the global batch.
func TestTrainTextHumanOutputOnTwoMPIRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ferry and starts mpirun")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("Open MPI is absent (no mpirun on PATH)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(mpirun, append([]string{"--oversubscribe", "--allow-run-as-root", "-np", "2", bin}, smallText(corpus(t), "--steps", "2")...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, want := range []string{"data-parallel over 2 ranks (mpirun): --batch 4 is per rank, a global batch of 2 × 4 = 8 sequences", "on 2 ranks (cpu each; global batch 2 × 4 = 8)"} {
		if strings.Count(string(out), want) != 1 {
			t.Errorf("want %q once in\n%s", want, out)
		}
	}
}
