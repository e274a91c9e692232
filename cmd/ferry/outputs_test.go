package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ferry/device/cpu"
)

// runWithin runs ferry args in-process and fails the test if it takes
// longer than limit (the command's goroutine is then left behind: the
// test has failed anyway).
func runWithin(t *testing.T, limit time.Duration, args ...string) (string, string, int) {
	t.Helper()
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := runCLI(t, args...)
		done <- result{out, errOut, code}
	}()
	select {
	case r := <-done:
		return r.out, r.errOut, r.code
	case <-time.After(limit):
		t.Fatalf("ferry %s: still running after %v", strings.Join(args, " "), limit)
	}
	return "", "", 0
}

// Every output flag refuses a named pipe, and a device, before any work,
// naming the flag: plan --out FIFO and calibrate --save FIFO hung, and
// demo --cpuprofile FIFO exited 0 with the profile lost in the pipe.
func TestOutputFlagsRefuseSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	data := corpus(t)
	tiny := func(extra ...string) []string {
		return append([]string{"train", "text", "--data", data, "--layers", "1", "--heads", "1", "--embd", "8",
			"--seq", "8", "--batch", "2", "--val-batches", "1", "--sample", "0", "--steps", "1"}, extra...)
	}
	meta := []string{"demo", "--device", "meta", "--steps", "1"}
	cases := []struct {
		flag string
		args []string
	}{
		{"--out", []string{"plan", "--budget", "3GiB", "--out", fifo}},
		{"--out", []string{"plan", "--budget", "3GiB", "--out", "/dev/null"}},
		{"--save", []string{"calibrate", "--seconds", "0.01", "--width", "16", "--batch", "4", "--save", fifo}},
		{"--disk-dir", []string{"calibrate", "--seconds", "0.01", "--width", "16", "--batch", "4", "--disk-dir", fifo}},
		{"--cpuprofile", append(meta, "--cpuprofile", fifo)},
		{"--cpuprofile", append(meta, "--cpuprofile", "/dev/full")},
		{"--trace", append(meta, "--trace", fifo)},
		{"--disk-dir", append(meta, "--disk-dir", fifo)},
		{"--log", tiny("--log", fifo)},
		{"--plot", tiny("--plot", fifo)},
		{"--checkpoint-dir", tiny("--checkpoint-dir", fifo)},
		{"--disk-dir", tiny("--mode", "offload-disk", "--disk-dir", fifo)},
		{"--token-cache", tiny("--tokenizer", "bpe", "--token-cache", fifo)},
		{"--log", []string{"train", "mnist", "--depth", "1", "--width", "8", "--steps", "1", "--log", fifo}},
	}
	if cpu.CanTuneMatmul() == nil && cpu.MatmulForced() == "" {
		cases = append(cases, struct {
			flag string
			args []string
		}{"--save", []string{"tune", "--layers", "1", "--width", "8", "--batch", "2", "--rounds", "1", "--check-rounds", "0", "--save", fifo}})
	}
	for _, c := range cases {
		_, errOut, code := runWithin(t, 20*time.Second, c.args...)
		if code != 1 || !strings.Contains(errOut, c.flag) || !(strings.Contains(errOut, "named pipe") || strings.Contains(errOut, "character device")) {
			t.Errorf("ferry %s: exit %d, stderr %q; want exit 1 naming %s and what the path is", strings.Join(c.args, " "), code, errOut, c.flag)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// A command whose output fails leaves no empty file or directory behind:
// not the checkpoint directory's parents, which the check of it made,
// nor an empty log.
func TestFailedOutputLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	data := corpus(t)
	args := smallText(data, "--steps", "1", "--checkpoint-dir", filepath.Join(dir, "a", "b", "ck"), "--log", filepath.Join(dir, "none", "log.jsonl"))
	if _, errOut, code := runCLI(t, args...); code != 1 || !strings.Contains(errOut, "--log") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s after a failed output: %v", dir, ents)
	}
	// A run that fails after its outputs were checked (its loss turns NaN)
	// leaves no empty checkpoint or --plot directory; its log, which
	// holds the first evaluation, stays.
	log := filepath.Join(dir, "log.jsonl")
	args = smallText(data, "--steps", "5", "--lr", "1e30", "--eval-every", "100", "--log-every", "100",
		"--checkpoint-dir", filepath.Join(dir, "c", "ck"), "--plot", filepath.Join(dir, "p", "q"), "--log", log)
	if _, errOut, code := runCLI(t, args...); code != 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "log.jsonl" {
		t.Errorf("left in %s after a failed run: %v (want the log alone)", dir, ents)
	}
}

// leftovers removes what a failed command created empty, innermost first,
// and leaves what holds data or was there before.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	before := filepath.Join(dir, "before")
	os.Mkdir(before, 0o755)
	var l leftovers
	empty, full := filepath.Join(dir, "x", "y", "empty.log"), filepath.Join(dir, "z", "full.log")
	for _, p := range []string{empty, full, before, filepath.Join(before, "d")} {
		l.note(p)
	}
	os.MkdirAll(filepath.Dir(empty), 0o755)
	os.WriteFile(empty, nil, 0o644)
	os.MkdirAll(filepath.Dir(full), 0o755)
	os.WriteFile(full, []byte("data"), 0o644)
	os.Mkdir(filepath.Join(before, "d"), 0o755)
	var ok error
	l.clean(&ok)
	if _, err := os.Stat(empty); err != nil {
		t.Fatalf("cleaned after success: %v", err)
	}
	failed := errors.New("failed")
	l.clean(&failed)
	for _, gone := range []string{filepath.Join(dir, "x"), filepath.Join(before, "d")} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stayed: %v", gone, err)
		}
	}
	for _, stays := range []string{full, before} {
		if _, err := os.Stat(stays); err != nil {
			t.Errorf("%s removed: %v", stays, err)
		}
	}
}

// demo --cpuprofile writes a whole profile after a run that succeeded, and
// none after one that failed.
func TestDemoCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	if _, errOut, code := runCLI(t, "demo", "--device", "meta", "--steps", "1", "--cpuprofile", prof); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v", err)
	}
	failed := filepath.Join(dir, "failed.prof")
	if _, _, code := runCLI(t, "demo", "--device", "meta", "--steps", "1", "--modes", "fast", "--cpuprofile", failed); code == 0 {
		t.Fatal("--modes fast: exit 0")
	}
	if _, err := os.Stat(failed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed run left %s: %v", failed, err)
	}
}
