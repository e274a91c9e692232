package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ferry/train"
)

// Ranks started with other settings (mpirun's MPMD form: each rank its
// own command line) fail at once, every rank naming the flag and who has
// what, instead of hanging or training apart. Each case is one that hung
// forever (--steps, --eval-every, --zero) or exited 0 without a word
// (--seed, --data, --batch, --val-batches) before ranks compared their
// settings; scripts/abuse.sh tries every flag.
func TestRanksThatDisagreeFailFast(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	data := corpus(t)
	other := filepath.Join(dir, "other.txt")
	b, _ := os.ReadFile(data)
	if err := os.WriteFile(other, append(b, "one more line\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	base := smallText(data, "--steps", "6", "--eval-every", "3")
	for _, c := range []struct {
		extra []string
		flag  string
	}{
		{[]string{"--steps", "7"}, "--steps"},
		{[]string{"--eval-every", "2"}, "--eval-every"},
		{[]string{"--zero", "1"}, "--zero"},
		{[]string{"--seed", "2"}, "--seed"},
		{[]string{"--data", other}, "--data"},
		{[]string{"--batch", "2"}, "--batch"},
		{[]string{"--val-batches", "3"}, "--val-batches"},
	} {
		args := append(append([]string{"-np", "1", bin}, base...), ":", "-np", "1", bin)
		args = append(append(args, base...), c.extra...)
		_, stderr, took, err := mpiJob(t, dir, args...)
		t.Logf("%s: the job ended after %v: %v", strings.Join(c.extra, " "), took.Round(time.Millisecond), err)
		if err == nil || err == errMPIJobHangs {
			t.Errorf("%s: the job did not fail: %v\n%s", c.flag, err, stderr)
			continue
		}
		n := 0
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "ranks disagree on ") && strings.Contains(l, " "+c.flag) && strings.Contains(l, ": rank 0 has ") {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%s: %d ranks said so, want 2:\n%s", c.flag, n, stderr)
		}
		if took > 10*time.Second {
			t.Errorf("%s: the job took %v to fail", c.flag, took)
		}
	}
	if runs, _ := os.ReadDir(filepath.Join(dir, "runs")); len(runs) != 0 {
		t.Errorf("failed jobs left run directories: %v", runs)
	}
}

// A rank that fails alone (its data file is missing) ends the job, saying
// why, instead of leaving rank 0 waiting for it.
func TestRankErrorEndsTheJob(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	base := smallText(corpus(t), "--steps", "6")
	args := append(append([]string{"-np", "1", bin}, base...), ":", "-np", "1", bin)
	args = append(append(args, base...), "--data", filepath.Join(dir, "missing.txt"))
	_, stderr, took, err := mpiJob(t, dir, args...)
	t.Logf("the job ended after %v: %v\n%s", took.Round(time.Millisecond), err, stderr)
	if err == nil || err == errMPIJobHangs || !strings.Contains(stderr, "ferry: rank 1 of 2: ") ||
		!strings.Contains(stderr, "missing.txt") || !strings.Contains(stderr, "ending the job") {
		t.Errorf("the job did not end with rank 1's error: %v", err)
	}
	if took > 10*time.Second {
		t.Errorf("the job took %v to end", took)
	}
}

// rankPID finds the process of rank of a job whose command line holds
// marker.
func rankPID(t *testing.T, marker string, rank int) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err1 := os.ReadFile(filepath.Join(p, "cmdline"))
		env, err2 := os.ReadFile(filepath.Join(p, "environ"))
		if err1 != nil || err2 != nil || !strings.Contains(string(cmd), marker) {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "OMPI_COMM_WORLD_RANK="+strconv.Itoa(rank) {
				pid, _ := strconv.Atoi(filepath.Base(p))
				return pid
			}
		}
	}
	return 0
}

// trainUntilCheckpoint starts 2 ranks training with a checkpoint every 5
// steps into ck, waits for the first, and returns the running job.
func trainUntilCheckpoint(t *testing.T, dir, ck string, extra ...string) (*exec.Cmd, *strings.Builder, context.CancelFunc) {
	t.Helper()
	mpirun, bin := mpiFerry(t)
	ctx, cancel := context.WithTimeout(context.Background(), mpiTimeout)
	args := append(append([]string{}, mpirunFlags...), "-np", "2", bin)
	args = append(args, smallText(corpus(t), "--steps", "1000000", "--eval-every", "5", "--checkpoint-dir", ck, "--checkpoint-every", "5")...)
	cmd := exec.CommandContext(ctx, mpirun, append(args, extra...)...)
	cmd.Dir = dir
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if latest, _ := (&train.Checkpointer{Dir: ck}).Latest(); latest != "" {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			cmd.Wait()
			t.Fatalf("no checkpoint after a minute:\n%s", out.String())
		}
	}
	time.Sleep(300 * time.Millisecond) // mid-run, past the first checkpoint
	return cmd, &out, cancel
}

// kill -9 of one of 2 ranks mid-run ends the other within 30 s (mpirun
// sees the rank die and ends the job), and the last checkpoint loads.
func TestKillOneRankMidRun(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck-kill")
	cmd, out, cancel := trainUntilCheckpoint(t, dir, ck)
	defer cancel()
	pid := rankPID(t, ck, 1)
	if pid == 0 {
		t.Fatal("no rank 1 found")
	}
	t0 := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	err := cmd.Wait()
	took := time.Since(t0)
	t.Logf("rank 1 killed; the job ended %v later: %v", took.Round(time.Millisecond), err)
	if err == nil || took > 30*time.Second {
		t.Errorf("the job went on: %v after %v\n%s", err, took, out.String())
	}
	if p := rankPID(t, ck, 0); p != 0 {
		t.Errorf("rank 0 (pid %d) still runs", p)
	}
	if _, errOut, code := runCLI(t, "eval", "--checkpoint-dir", ck); code != 0 {
		t.Errorf("the last checkpoint does not load: %s", errOut)
	}
}

// A rank that hangs (stopped with SIGSTOP) leaves the other waiting in a
// collective: its watchdog ends the job after --collective-timeout, naming
// the collective, and the last checkpoint loads.
func TestHungRankEndsTheJob(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck-hang")
	cmd, out, cancel := trainUntilCheckpoint(t, dir, ck, "--collective-timeout", "2s")
	defer cancel()
	pid := rankPID(t, ck, 1)
	if pid == 0 {
		t.Fatal("no rank 1 found")
	}
	t0 := time.Now()
	syscall.Kill(pid, syscall.SIGSTOP)
	err := cmd.Wait()
	took := time.Since(t0)
	said := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "ferry: dist: rank 0 of 2: ") {
			said = l
		}
	}
	t.Logf("rank 1 stopped; the job ended %v later: %v\n%s", took.Round(time.Millisecond), err, said)
	if err == nil || took > 30*time.Second || !strings.Contains(said, "has waited 2s for the other ranks") {
		t.Errorf("the watchdog did not end the job: %v after %v\n%s", err, took, lastLines(out.String(), 12))
	}
	if _, errOut, code := runCLI(t, "eval", "--checkpoint-dir", ck); code != 0 {
		t.Errorf("the last checkpoint does not load: %s", errOut)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func TestCollectiveTimeoutSetting(t *testing.T) {
	for _, c := range []struct {
		flag, env string
		want      time.Duration
		bad       string
	}{
		{"", "", 5 * time.Minute, ""},
		{"", "90s", 90 * time.Second, ""},
		{"", "2.5", 2500 * time.Millisecond, ""},
		{"10m", "90s", 10 * time.Minute, ""},
		{"0", "", 0, ""},
		{"", "soon", 0, "FERRY_COLLECTIVE_TIMEOUT: \"soon\" is not a duration"},
		{"", "-1s", 0, "is negative"},
	} {
		t.Setenv(timeoutEnv, c.env)
		var o trainOptions
		o.registerRanks(flag.NewFlagSet("test", flag.ContinueOnError))
		if c.flag != "" {
			if err := o.timeout.Set(c.flag); err != nil {
				t.Fatal(err)
			}
		}
		got, err := o.timeoutFor()
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("flag %q env %q: %v, want an error with %q", c.flag, c.env, err, c.bad)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("flag %q env %q: %v, %v; want %v", c.flag, c.env, got, err, c.want)
		}
	}
	if _, errOut, code := runCLI(t, "train", "text", "--collective-timeout", "-5s"); code != 2 || !strings.Contains(errOut, "negative") {
		t.Errorf("--collective-timeout -5s: exit %d, %s", code, errOut)
	}
}

// What plan refuses across ranks, train refuses under mpirun (one rule,
// rankStateError): gradients and parameters in host memory are for one
// process. The optimizer's state in host memory is not refused.
func TestRankStateRuleIsShared(t *testing.T) {
	_, errOut, code := runCLI(t, "plan", "--budget", "1GiB", "--ranks", "2", "--zero", "2", "--optimizer-state", "host", "--gradients", "host")
	if code == 0 || !strings.Contains(errOut, "--gradients host with --ranks 2: across ranks the gradients are reduced on the device") {
		t.Errorf("plan --zero 2 --gradients host: exit %d, %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "plan", "--budget", "1GiB", "--ranks", "2", "--zero", "1", "--optimizer-state", "host", "--parameters", "host")
	if code == 0 || !strings.Contains(errOut, "--parameters host with --ranks 2: across ranks, the parameters in host memory are ZeRO-3's shards") {
		t.Errorf("plan --zero 1 --parameters host: exit %d, %s", code, errOut)
	}
	small := []string{"plan", "--model", "gpt", "--vocab", "256", "--seq", "32", "--layers", "2", "--heads", "2", "--embd", "64", "--batch", "2", "--budget", "1GiB"}
	if _, errOut, code := runCLI(t, append(small, "--ranks", "2", "--optimizer-state", "host")...); code != 0 {
		t.Errorf("plan --ranks 2 --optimizer-state host: exit %d, %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, append(small, "--ranks", "2", "--zero", "3", "--optimizer-state", "host", "--parameters", "host")...); code != 0 {
		t.Errorf("plan --ranks 2 --zero 3 --optimizer-state host --parameters host: exit %d, %s", code, errOut)
	}
	// As mpirun announces rank 0 of 2: refused before MPI starts.
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	_, errOut, code = runCLI(t, smallText(corpus(t), "--zero", "1", "--optimizer-state", "host", "--parameters", "host")...)
	if code == 0 || !strings.Contains(errOut, "--parameters host with mpirun -np 2: across ranks, the parameters in host memory are ZeRO-3's shards") {
		t.Errorf("train --zero 1 --parameters host: exit %d, %s", code, errOut)
	}
	_, errOut, code = runCLI(t, smallText(corpus(t), "--zero", "3", "--optimizer-state", "device", "--gradients", "host")...)
	if code == 0 || !strings.Contains(errOut, "--optimizer-state host") {
		t.Errorf("train --zero 3 --optimizer-state device --gradients host: exit %d, %s", code, errOut)
	}
}

func TestSettingFlagNames(t *testing.T) {
	for key, want := range map[string]string{
		"steps": "--steps", "stop_after": "--stop-after", "shard": "--zero", "val_batches": "--val-batches",
		"beta2": "--optimizer-args beta2", "embd": "--embd", "weight_decay": "--weight-decay", "ferry_version": "ferry's build",
	} {
		if got := settingFlag(key); got != want {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}
	err := rankFlagError(&train.RankMismatchError{Diffs: []train.RankDiff{{Key: "stop_after", Values: []string{"0", "3"}}}})
	if !strings.HasPrefix(err.Error(), "ranks disagree on --stop-after: rank 0 has 0, rank 1 has 3") {
		t.Error(err)
	}
}
