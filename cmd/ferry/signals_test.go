package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckWriter blocks every write until release is closed, as a pipe whose
// reader stopped reading does.
type stuckWriter struct{ release chan struct{} }

func (s stuckWriter) Write(p []byte) (int, error) { <-s.release; return len(p), nil }

// The command's stdout never makes a writer wait for a stalled reader
// below queueLimit, waits at the limit only until a signal, and after a
// signal Flush gives up within flushGrace with errStalled. Write errors
// still reach Flush.
func TestCheckedWriterDoesNotBlock(t *testing.T) {
	defer signalled.Store(false)
	stuck := stuckWriter{make(chan struct{})}
	defer close(stuck.release)
	c := newCheckedWriter(stuck)
	start := time.Now()
	line := bytes.Repeat([]byte("x"), 1<<10)
	for range 1 << 10 { // 1 MiB to a reader that takes nothing
		if _, err := c.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("1 MiB of writes to a stalled reader took %v", d)
	}
	// At the limit a writer waits, until a signal. (The drain may have
	// taken the queue already, blocked in the stuck write: then the first
	// write fills an empty queue and the second waits.)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, queueLimit))
		if err == nil {
			_, err = c.Write([]byte("x"))
		}
		wrote <- err
	}()
	select {
	case <-wrote:
		t.Fatal("a write past the limit did not wait for the reader")
	case <-time.After(100 * time.Millisecond):
	}
	noteSignal()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("a write past the limit still waits after the signal")
	}
	start = time.Now()
	err := c.Flush()
	if d := time.Since(start); !errors.Is(err, errStalled) || d > flushGrace+time.Second {
		t.Errorf("Flush after a signal: %v after %v; want errStalled within %v", err, d, flushGrace)
	}

	signalled.Store(false)
	full := newCheckedWriter(fullWriter{})
	full.Write([]byte("summary\n"))
	if err := full.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a full disk: %v", err)
	}
	if _, err := full.Write([]byte("more")); err == nil {
		t.Error("a write after a failed one succeeded")
	}
}

// startChildStdoutFull starts ferry args in a child process (TestMain), its stdout
// a pipe of one page that nobody reads.
func startChildStdoutFull(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FERRY_TEST_ARGS="+string(b))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// F_SETPIPE_SZ: a page, so that a few progress lines fill it.
	syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), 1031, 4096)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &stderr
}

// waitExit waits for cmd at most limit and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration, stderr *bytes.Buffer) int {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running %v after the signal; stderr:\n%s", limit, stderr.String())
	}
	return 0
}

// With stdout's pipe full and nobody reading it (ferry train … | less,
// the pager stalled), training goes on, and one Ctrl-C stops it at the
// next step boundary with its checkpoint and exit 130: printing never
// holds the signal up.
func TestSignalLandsWithStdoutBlocked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	ck, log := filepath.Join(dir, "ck"), filepath.Join(dir, "log.jsonl")
	cmd, stderr := startChildStdoutFull(t, smallText(corpus(t), "--steps", "1000000", "--log-every", "1", "--eval-every", "1000000",
		"--checkpoint-dir", ck, "--checkpoint-every", "1000000", "--log", log)...)
	// 400 steps logged: far more progress lines than the pipe holds.
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if bytes.Count(b, []byte("\n")) >= 400 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("training stalled behind the full stdout pipe: %d steps logged in 60 s; stderr:\n%s", bytes.Count(b, []byte("\n")), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, cmd, 10*time.Second, stderr); code != 130 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted: stopped after step") || !strings.Contains(stderr.String(), "stdout is not being read") {
		t.Errorf("stderr does not say where it stopped and that stdout was not read:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ck, "latest")); err != nil {
		t.Errorf("no checkpoint at the interruption: %v", err)
	}
}

// A demo whose step is held up by a fault-injection delay (each copy to
// the host a minute) still ends on one SIGTERM, demoGrace after it, with
// exit 130 and nothing left behind.
func TestDemoSIGTERMDuringADelayedStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	cmd, stderr := startChildStdoutFull(t, "demo", "--device", "cpu", "--modes", "offload", "--trace", filepath.Join(dir, "trace"),
		"--layers", "2", "--width", "64", "--batch", "8", "--steps", "1", "--device-param", "copy_delay=1m")
	time.Sleep(1500 * time.Millisecond) // in the warm-up step, waiting on a copy
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd, demoGrace+5*time.Second, stderr); code != 130 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	t.Logf("ended %v after SIGTERM", time.Since(start).Round(10*time.Millisecond))
	if !strings.Contains(stderr.String(), "no step boundary") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
