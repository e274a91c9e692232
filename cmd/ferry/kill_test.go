package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killIterations is how many runs TestKillDuringCheckpointWrites
// interrupts each way: 3 by default, FERRY_KILL_ITERATIONS for more (the
// issue asks for 30).
func killIterations(t *testing.T) int {
	if s := os.Getenv("FERRY_KILL_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FERRY_KILL_ITERATIONS=%q: want a positive integer", s)
		}
		return n
	}
	return 3
}

// temporaries lists the temporary checkpoint files in dir.
func temporaries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), "-tmp-") || strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// ferry train text with a 4-layer, 384-wide GPT checkpointing every step
// is interrupted at random moments while it writes a checkpoint: by two
// Ctrl-Cs in a row, and by kill -9. After each, latest loads (ferry sample
// checks every file's SHA-256 and loads the weights) and the next run
// resumes from it; after two Ctrl-Cs no temporary is left at all, and
// after a kill -9 the next run sweeps what the dead one left.
func TestKillDuringCheckpointWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes for a minute")
	}
	n := killIterations(t)
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "text", "--data", data, "--layers", "4", "--heads", "6", "--embd", "384", "--seq", "32",
		"--batch", "2", "--val-batches", "1", "--sample", "0", "--eval-every", "100000", "--steps", "100000",
		"--checkpoint-dir", ck, "--checkpoint-every", "1", "--keep", "2", "--resume"}
	rng := rand.New(rand.NewPCG(22, uint64(time.Now().UnixNano())))
	var sigints, kills, caught int
	for i := 0; i < 2*n; i++ {
		kill := i%2 == 1
		b, _ := json.Marshal(args)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "FERRY_TEST_ARGS="+string(b))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		// Wait for a checkpoint being written (a temporary directory of
		// this child) once one is complete, then strike at a random
		// moment within it.
		mine := ".step-"
		deadline := time.Now().Add(120 * time.Second)
		found := false
	wait:
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				t.Fatalf("run %d ended before it was interrupted, exit %d:\n%s", i, cmd.ProcessState.ExitCode(), stderr.String())
			default:
			}
			if _, err := os.Stat(filepath.Join(ck, "latest")); err != nil {
				time.Sleep(time.Millisecond) // the first checkpoint is not yet complete
				continue
			}
			for _, name := range temporaries(ck) {
				if strings.HasPrefix(name, mine) && strings.Contains(name, "-tmp-"+strconv.Itoa(cmd.Process.Pid)+"-") {
					found = true
					break wait
				}
			}
			time.Sleep(time.Millisecond)
		}
		if !found {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("run %d wrote no checkpoint in 120 s:\n%s", i, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		if kill {
			cmd.Process.Kill()
			kills++
		} else {
			cmd.Process.Signal(syscall.SIGINT)
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGINT)
			sigints++
		}
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("run %d did not end within 60 s of its interruption:\n%s", i, stderr.String())
		}
		code := cmd.ProcessState.ExitCode()
		if kill {
			if code != -1 {
				caught++ // it ended before the kill landed
			}
		} else {
			if code != 130 {
				t.Fatalf("run %d: two Ctrl-Cs gave exit %d:\n%s", i, code, stderr.String())
			}
			if left := temporaries(ck); len(left) != 0 {
				t.Fatalf("run %d: two Ctrl-Cs left %v", i, left)
			}
			if _, err := os.Stat(filepath.Join(ck, ".lock")); err == nil {
				t.Fatalf("run %d: two Ctrl-Cs left the .lock", i)
			}
		}
		out, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck, "--n", "4", "--json")
		if code != 0 {
			t.Fatalf("run %d (%s): latest does not load: exit %d %s%s", i, map[bool]string{true: "kill -9", false: "2 × SIGINT"}[kill], code, out, errOut)
		}
	}
	// One more run resumes from latest and sweeps the killed runs' leftovers.
	final := append(append([]string(nil), args...), "--stop-after", "1")
	out, errOut, code := runCLI(t, final...)
	if code != 0 || !strings.Contains(out, "resumed from") {
		t.Fatalf("final resume: exit %d\n%s%s", code, out, errOut)
	}
	if left := temporaries(ck); len(left) != 0 {
		t.Fatalf("temporaries left after the final resume: %v", left)
	}
	t.Logf("%d runs interrupted by two Ctrl-Cs, %d by kill -9 during checkpoint writes; latest loaded after each", sigints, kills)
}
