package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ferry/safetensors"
)

// proc is ferry running in a child process (see TestMain), its stderr
// collected line by line.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it ended and its stderr is read
	mu     sync.Mutex
	lines  []string
}

func startChild(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	b, _ := json.Marshal(args)
	p := &proc{cmd: exec.Command(os.Args[0]), exited: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), "FERRY_TEST_ARGS="+string(b)), env...)
	p.cmd.Stdout = io.Discard
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitFor waits until stderr holds s (true), or the process ended or d
// passed (false).
func (p *proc) waitFor(s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.stderr(), s) {
			return true
		}
		select {
		case <-p.exited:
			return strings.Contains(p.stderr(), s)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return false
}

// end waits up to d for the process to end, killing it after.
func (p *proc) end(d time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.exited
		return false
	}
}

// A Ctrl-C while a command is blocked in a slow read of a checkpoint
// (FERRY_TEST_READ_DELAY holds every block of model.safetensors for an
// hour) ends train --resume, train --init-from, eval and sample within
// 2 s, with exit 130 and an error that says so, and leaves the
// checkpoint directory as it was: no .lock, no temporary, no new
// directory.
func TestCtrlCDuringASlowLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	base := smallText(data, "--steps", "2")
	if _, errOut, code := runCLI(t, append(base, "--checkpoint-dir", ck)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"train --resume", append(smallText(data, "--steps", "4", "--override", "steps"), "--checkpoint-dir", ck, "--resume")},
		{"train --init-from", append(smallText(data, "--steps", "1"), "--init-from", ck, "--checkpoint-dir", out)},
		{"eval", []string{"eval", "--checkpoint-dir", ck}},
		{"sample", []string{"sample", "--checkpoint-dir", ck, "--n", "4"}},
	} {
		before := listing(ck)
		p := startChild(t, c.args, "FERRY_TEST_READ_DELAY=1h:model.safetensors")
		if !p.waitFor("test read delay: reading", 60*time.Second) {
			p.end(0)
			t.Fatalf("%s: no slow read (exit %d):\n%s", c.name, p.cmd.ProcessState.ExitCode(), p.stderr())
		}
		start := time.Now()
		p.cmd.Process.Signal(syscall.SIGINT)
		if !p.end(10 * time.Second) {
			t.Fatalf("%s: still running 10 s after Ctrl-C:\n%s", c.name, p.stderr())
		}
		took := time.Since(start)
		msg := p.stderr()
		if code := p.cmd.ProcessState.ExitCode(); code != 130 || took > 2*time.Second || !strings.Contains(msg, "interrupted by a signal") {
			t.Errorf("%s: exit %d after %v; want 130 within 2 s, saying it was interrupted:\n%s", c.name, code, took, msg)
		}
		if after := listing(ck); after != before {
			t.Errorf("%s: the checkpoint directory changed:\n%s\nnow\n%s", c.name, before, after)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: left %s", c.name, out)
		}
		t.Logf("%s: exit 130 %v after Ctrl-C", c.name, took.Round(time.Millisecond))
	}
}

// SIGQUIT and two Ctrl-Cs in a row, while a run writes its checkpoints,
// leave no temporary checkpoint and no .lock; SIGQUIT still prints Go's
// goroutine dump and exits 2.
func TestQuitLeavesNoTemporaryAndNoLock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	data := corpus(t)
	for _, sigs := range [][]syscall.Signal{{syscall.SIGQUIT}, {syscall.SIGINT, syscall.SIGINT}} {
		for i := 0; i < 3; i++ {
			ck := filepath.Join(t.TempDir(), "ck")
			args := []string{"train", "text", "--data", data, "--layers", "2", "--heads", "4", "--embd", "256", "--seq", "32",
				"--batch", "2", "--val-batches", "1", "--sample", "0", "--eval-every", "100000", "--steps", "100000",
				"--checkpoint-dir", ck, "--checkpoint-every", "1", "--keep", "2"}
			p := startChild(t, args)
			// Strike while a checkpoint of this child is being written,
			// or as soon after as the poll sees.
			mine := "-tmp-" + strconv.Itoa(p.cmd.Process.Pid) + "-"
			deadline := time.Now().Add(60 * time.Second)
			for found := false; !found && time.Now().Before(deadline); {
				for _, n := range temporaries(ck) {
					found = found || strings.Contains(n, mine)
				}
				time.Sleep(time.Millisecond)
			}
			for _, s := range sigs {
				p.cmd.Process.Signal(s)
				time.Sleep(5 * time.Millisecond)
			}
			if !p.end(30 * time.Second) {
				t.Fatalf("%v: still running 30 s later:\n%s", sigs, p.stderr())
			}
			code := p.cmd.ProcessState.ExitCode()
			want := 130
			if sigs[0] == syscall.SIGQUIT {
				want = 2
			}
			if code != want {
				t.Errorf("%v: exit %d, want %d:\n%s", sigs, code, want, firstLines(p.stderr(), 5))
			}
			if sigs[0] == syscall.SIGQUIT && !strings.Contains(p.stderr(), "goroutine ") {
				t.Errorf("SIGQUIT: no goroutine dump")
			}
			if left := temporariesUnder(ck); len(left) > 0 {
				t.Errorf("%v: left %v", sigs, left)
			}
		}
	}
}

// A resume at a learning rate of 1e30 with --keep 1 diverges: its first
// step leaves finite weights near 1e30, the next loss is NaN. It must
// leave a checkpoint that eval scores with a finite loss, named by
// latest; the diverged checkpoint beside it is refused by eval and
// sample.
func TestDivergedResumeKeepsAGoodCheckpoint(t *testing.T) {
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	base := smallText(data)
	if _, errOut, code := runCLI(t, append(base, "--steps", "3", "--checkpoint-dir", ck)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, errOut, code := runCLI(t, append(base, "--steps", "8", "--checkpoint-dir", ck, "--resume", "--override", "lr,min_lr,steps",
		"--lr", "1e30", "--keep", "1", "--checkpoint-every", "1")...)
	if code == 0 || !strings.Contains(errOut, "not finite") {
		t.Fatalf("the diverging resume: exit %d: %s", code, errOut)
	}
	latest, err := os.ReadFile(filepath.Join(ck, "latest"))
	if err != nil {
		t.Fatal(err)
	}
	ev := runJSON(t, "eval", "--checkpoint-dir", ck)
	if loss, ok := ev["val_loss"].(float64); !ok || loss > 10 || filepath.Base(ev["checkpoint"].(string)) != strings.TrimSpace(string(latest)) {
		t.Fatalf("eval: %v; want a finite loss of %s, the checkpoint latest names", ev, latest)
	}
	bad := filepath.Join(ck, "step-00000004")
	if _, err := os.Stat(bad); err != nil {
		t.Fatalf("the diverged checkpoint: %v", err)
	}
	if _, errOut, code := runCLI(t, "eval", "--checkpoint-dir", bad); code != 1 || !strings.Contains(errOut, "diverged") {
		t.Errorf("eval of the diverged checkpoint: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, "sample", "--checkpoint-dir", bad, "--n", "4"); code != 1 || !strings.Contains(errOut, "diverged") {
		t.Errorf("sample of the diverged checkpoint: exit %d: %s", code, errOut)
	}
}

// NaN weights written with every hash recomputed (a crafted checkpoint)
// are refused by eval, sample and --init-from, naming the tensor.
func TestCraftedNaNWeightsAreRefused(t *testing.T) {
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, errOut, code := runCLI(t, append(smallText(data), "--steps", "2", "--checkpoint-dir", ck)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	step := filepath.Join(ck, "step-00000002")
	model := filepath.Join(step, "model.safetensors")
	f, err := safetensors.ReadFile(model, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := &f.Tensors[0]
	binary.LittleEndian.PutUint32(x.Data[4:], math.Float32bits(float32(math.NaN())))
	if err := safetensors.WriteFile(model, f.Tensors, f.Metadata); err != nil {
		t.Fatal(err)
	}
	// trainer.json's record of the file, and trainer.sha256, recomputed.
	var meta map[string]any
	mb, _ := os.ReadFile(filepath.Join(step, "trainer.json"))
	json.Unmarshal(mb, &meta)
	wb, _ := os.ReadFile(model)
	sum := sha256.Sum256(wb)
	meta["files"].(map[string]any)["model.safetensors"] = map[string]any{"size": len(wb), "sha256": hex.EncodeToString(sum[:])}
	mb, _ = json.MarshalIndent(meta, "", "  ")
	mb = append(mb, '\n')
	os.WriteFile(filepath.Join(step, "trainer.json"), mb, 0o644)
	ms := sha256.Sum256(mb)
	os.WriteFile(filepath.Join(step, "trainer.sha256"), []byte(hex.EncodeToString(ms[:])+"  trainer.json\n"), 0o644)
	for _, args := range [][]string{
		{"eval", "--checkpoint-dir", ck},
		{"sample", "--checkpoint-dir", ck, "--n", "4"},
		append(smallText(data, "--steps", "1"), "--init-from", ck, "--checkpoint-dir", filepath.Join(t.TempDir(), "out")),
	} {
		_, errOut, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, "not finite") || !strings.Contains(errOut, x.Name) {
			t.Errorf("%s: exit %d: %s; want exit 1 naming %s as not finite", args[0], code, errOut, x.Name)
		}
	}
}
