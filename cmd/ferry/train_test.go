package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"ferry/models"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run the ferry command in a child process (for
// signals): with FERRY_TEST_ARGS set, the test binary is ferry.
func TestMain(m *testing.M) {
	// Runs without --checkpoint-dir save into runs/ under the current
	// directory: the tests' go to a temporary one, not the source tree,
	// which the child processes share (they may be killed).
	if a := os.Getenv("FERRY_TEST_ARGS"); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			panic(err)
		}
		runsDir = filepath.Join(os.Getenv("FERRY_TEST_RUNS"), "runs")
		os.Exit(run(args, os.Stdout, os.Stderr))
	}
	tmp, err := os.MkdirTemp("", "ferry-test-runs-")
	if err != nil {
		panic(err)
	}
	runsDir = filepath.Join(tmp, "runs")
	os.Setenv("FERRY_TEST_RUNS", tmp)
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// corpus writes a small text file: words in a fixed pseudo-random order.
func corpus(t *testing.T) string {
	t.Helper()
	words := strings.Fields("func main return if else for range go defer type struct map chan select case the of a to in is")
	rng := rand.New(rand.NewPCG(3, 3))
	var b strings.Builder
	for b.Len() < 40_000 {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(8) == 0 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	path := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// smallText is a GPT small enough for a test, with dropout on.
func smallText(data string, extra ...string) []string {
	return append([]string{"train", "text", "--data", data, "--layers", "2", "--heads", "2", "--embd", "32",
		"--seq", "16", "--batch", "4", "--dropout", "0.1", "--val-batches", "2", "--sample", "0"}, extra...)
}

// logLosses reads step → loss from a --log file.
func logLosses(t *testing.T, path string) map[int]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	losses := map[int]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Step int      `json:"step"`
			Loss *float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("--log line %q: %v", sc.Text(), err)
		}
		if rec.Loss != nil {
			losses[rec.Step] = *rec.Loss
		}
	}
	return losses
}

func sameBits(t *testing.T, what string, a, b map[int]float64, steps int) {
	t.Helper()
	for s := 1; s <= steps; s++ {
		x, okx := a[s]
		y, oky := b[s]
		if !okx || !oky || math.Float64bits(x) != math.Float64bits(y) {
			t.Errorf("%s: step %d loss %v (%v) vs %v (%v)", what, s, x, okx, y, oky)
		}
	}
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s and %s differ", a, b)
	}
}

// Training 6 steps straight, and 3 steps, a stop, a resume and 3 more,
// give bit-identical losses and parameters and optimizer state, with
// dropout and with offloading on.
func TestTrainTextResumeIsExact(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	straight, split := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	args := func(ck, log string, extra ...string) []string {
		return smallText(data, append([]string{"--steps", "6", "--eval-every", "3", "--offload",
			"--checkpoint-dir", ck, "--log", log}, extra...)...)
	}
	if out, errOut, code := runCLI(t, args(straight, straight+".jsonl")...); code != 0 {
		t.Fatalf("straight run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, args(split, split+".jsonl", "--stop-after", "3")...)
	if code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("first half: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, args(split, split+".jsonl", "--resume")...)
	if code != 0 || !strings.Contains(out, "resumed from") {
		t.Fatalf("resumed half: exit %d\n%s%s", code, out, errOut)
	}
	sameBits(t, "resumed", logLosses(t, straight+".jsonl"), logLosses(t, split+".jsonl"), 6)
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		sameFile(t, filepath.Join(straight, "step-00000006", f), filepath.Join(split, "step-00000006", f))
	}
	// ferry sample reads the checkpoint back.
	out, errOut, code = runCLI(t, "sample", "--checkpoint-dir", split, "--n", "12", "--prompt", "go ", "--json")
	var sample struct {
		Step int    `json:"step"`
		Text string `json:"text"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sample) != nil || sample.Step != 6 || !strings.HasPrefix(sample.Text, "go ") || len(sample.Text) < 15 {
		t.Fatalf("ferry sample: exit %d, %q %s", code, out, errOut)
	}
}

// A checkpoint of another model is refused with what differs, and the
// run changes nothing.
func TestTrainResumeRefusesAnotherModel(t *testing.T) {
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, errOut, code := runCLI(t, smallText(data, "--steps", "2", "--checkpoint-dir", ck)...); code != 0 {
		t.Fatal(errOut)
	}
	before, _ := os.ReadFile(filepath.Join(ck, "step-00000002", "model.safetensors"))
	args := smallText(data, "--steps", "4", "--checkpoint-dir", ck, "--resume")
	args[9] = "48" // --embd
	_, errOut, code := runCLI(t, args...)
	if code != 1 || !strings.Contains(errOut, "was written by a different run") || !strings.Contains(errOut, "embd is 32 there, 48 here") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	after, _ := os.ReadFile(filepath.Join(ck, "step-00000002", "model.safetensors"))
	if !bytes.Equal(before, after) {
		t.Error("a refused resume changed the checkpoint")
	}
	t.Logf("what a user sees:\n%s", errOut)
}

// MNIST with offloading or recomputation trains bit for bit as without.
func TestTrainMNISTModesAreBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("reads MNIST three times")
	}
	dir := t.TempDir()
	var logs []map[int]float64
	for _, mode := range []string{"none", "offload", "recompute"} {
		log := filepath.Join(dir, mode+".jsonl")
		out, errOut, code := runCLI(t, "train", "mnist", "--depth", "2", "--width", "64", "--batch", "32",
			"--steps", "12", "--eval-every", "12", "--mode", mode, "--log", log, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", mode, code, out, errOut)
		}
		var sum map[string]any
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatalf("%s: --json printed %q: %v", mode, out, err)
		}
		if acc, ok := sum["test_accuracy"].(float64); !ok || acc <= 0.2 || acc > 1 {
			t.Errorf("%s: test_accuracy %v", mode, sum["test_accuracy"])
		}
		logs = append(logs, logLosses(t, log))
	}
	sameBits(t, "offload", logs[0], logs[1], 12)
	sameBits(t, "recompute", logs[0], logs[2], 12)
}

// SIGINT during training finishes the step, writes a checkpoint, removes
// the offloader's files, prints what was done and exits 130 with one line.
func TestTrainSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	data := corpus(t)
	dir := t.TempDir()
	ck, disk := filepath.Join(dir, "ck"), filepath.Join(dir, "disk")
	os.Mkdir(disk, 0o755)
	args, _ := json.Marshal(smallText(data, "--steps", "100000", "--mode", "offload-disk", "--disk-dir", disk,
		"--checkpoint-dir", ck, "--checkpoint-every", "100000", "--log-every", "1"))
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FERRY_TEST_ARGS="+string(args))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "step 3/") {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != 130 {
		t.Fatalf("exit %d (%v), stderr:\n%s", code, err, stderr.String())
	}
	if !strings.Contains(rest.String(), "interrupted:") {
		t.Errorf("no summary after the interruption:\n%s", rest.String())
	}
	last := strings.TrimSpace(stderr.String())
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if !strings.HasPrefix(last, "ferry train text: interrupted: stopped after step") || !strings.Contains(last, "--resume") {
		t.Errorf("last stderr line %q", last)
	}
	if files, _ := os.ReadDir(disk); len(files) != 0 {
		t.Errorf("offload files left behind: %v", files)
	}
	if _, err := os.Stat(filepath.Join(ck, "latest")); err != nil {
		t.Errorf("no checkpoint written at the interruption: %v", err)
	}
}

// A second child, killed with SIGKILL at random moments while it writes
// checkpoints every step, always leaves a checkpoint that resumes.
func TestTrainSIGKILLLeavesALoadableCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	args, _ := json.Marshal(smallText(data, "--steps", "100000", "--checkpoint-dir", ck, "--checkpoint-every", "1", "--keep", "2", "--resume"))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 4; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "FERRY_TEST_ARGS="+string(args))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for a first checkpoint, then kill at a random moment.
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(ck, "latest")); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		// The checkpoint resumes (a short run from it).
		resume, _ := json.Marshal(smallText(data, "--steps", "100000", "--checkpoint-dir", ck, "--resume", "--stop-after", "1", "--keep", "2"))
		var resumeArgs []string
		json.Unmarshal(resume, &resumeArgs)
		out, errOut, code := runCLI(t, resumeArgs...)
		if code != 0 || !strings.Contains(out, "resumed from") {
			t.Fatalf("kill %d: resume failed, exit %d\n%s%s", i, code, out, errOut)
		}
	}
	entries, _ := os.ReadDir(ck)
	for _, e := range entries {
		if strings.Contains(e.Name(), "-tmp-") {
			t.Errorf("temporary checkpoint %s survived the resume", e.Name())
		}
	}
}

// A plan from ferry plan for the same GPT trains bit for bit as without
// it, recomputing what the plan says; a policy for another model is
// refused with every problem named.
func TestTrainTextPolicy(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	if _, errOut, code := runCLI(t, "plan", "--model", "gpt", "--vocab", "256", "--seq", "16", "--layers", "2", "--heads", "2",
		"--embd", "32", "--batch", "4", "--dropout", "0.1", "--budget", "900KiB", "--profile", "cpu", "--out", policy); code != 0 {
		t.Fatalf("plan: %s", errOut)
	}
	var logs []map[int]float64
	for _, extra := range [][]string{nil, {"--policy", policy}} {
		log := filepath.Join(dir, "run.jsonl")
		out, errOut, code := runCLI(t, smallText(data, append([]string{"--steps", "4", "--log", log, "--json"}, extra...)...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", extra, code, out, errOut)
		}
		logs = append(logs, logLosses(t, log))
	}
	sameBits(t, "policy", logs[0], logs[1], 4)
	// The same policy for a wider model: shapes differ.
	args := smallText(data, "--steps", "1", "--policy", policy)
	args[9] = "64" // --embd
	if _, errOut, code := runCLI(t, args...); code != 1 || !strings.Contains(errOut, "was planned for another model: pass --embd 32") {
		t.Errorf("a policy for another model: exit %d, %s", code, errOut)
	}
}

// Hostile values get a clear error and exit 1 or 2, never a panic, and
// leave no files behind.
func TestTrainBadInput(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	text := func(extra ...string) []string { return smallText(data, extra...) }
	cases := []struct {
		args []string
		want string
	}{
		{text("--steps", "0"), "--steps must be a positive integer"},
		{text("--steps", "-3"), "--steps must be a positive integer"},
		{text("--steps", "abc"), "invalid value"},
		{text("--batch", "9223372036854775807"), "at most 16777216"},
		{text("--accum", "0"), "--accum must be"},
		{text("--lr", "NaN", "--steps", "1"), "--lr must be a positive finite number"},
		{text("--lr", "-1", "--steps", "1"), "--lr must be a positive finite number"},
		{text("--weight-decay", "-0.5", "--steps", "1"), "--weight-decay must be a finite number ≥ 0"},
		{text("--min-lr", "-1", "--steps", "1"), "--min-lr must be ≥ 0"},
		{text("--clip", "NaN"), "--clip must be"},
		{text("--dropout", "1"), "--dropout must be in [0, 1)"},
		{text("--model", "mlp"), "not a language model"},
		{text("--warmup", "-5"), "--warmup must be"},
		{text("--momentum", "1", "--optimizer", "sgd"), "--momentum must be below 1"},
		{text("--optimizer", "adam9"), `unknown optimizer "adam9": choose adamw, adamw8bit, lion, sgd`},
		{text("--optimizer", ""), "--optimizer is empty"},
		{text("--momentum", "0.5"), "adamw takes no momentum"},
		{text("--optimizer", "lion", "--optimizer-args", "beta1=2"), "lion: beta1 must be in [0, 1]"},
		{text("--optimizer-args", "beta3=0.5"), `adamw takes no "beta3"`},
		{text("--optimizer-args", "beta1"), "is not key=value"},
		{text("--optimizer-args", "eps=NaN"), "is not a finite number"},
		{text("--optimizer-args", "lr=1"), "give the learning rate with --lr"},
		{text("--optimizer", "adamw8bit", "--optimizer-args", "min_8bit_size=-1"), "min_8bit_size must be a whole number"},
		{text("--mode", "bogus"), "is not one of"},
		{text("--offload", "--mode", "recompute"), "disagree"},
		{text("--resume"), "need --checkpoint-dir"},
		{text("--policy", filepath.Join(dir, "missing.json"), "--steps", "1"), "no such file"},
		{text("--mode", "recompute", "--policy", file), "cannot be combined"},
		{text("--log", filepath.Join(dir, "no", "such", "dir.jsonl"), "--steps", "1"), "--log"},
		{text("--log", "/dev/full", "--steps", "1"), "--log /dev/full is a character device, not a regular file"},
		{text("--plot", filepath.Join(file, "sub"), "--steps", "1"), "--plot"},
		{text("--checkpoint-dir", file, "--steps", "1"), "not a directory"},
		{text("--layers", "9223372036854775807"), "--layers must be a whole number"},
		{text("--embd", "65536", "--layers", "1000", "--heads", "1"), "lower --batch"},
		{text("--heads", "3"), "not a multiple"},
		{text("--seq", "100000"), "too little"},
		{smallText(empty), "holds no text"},
		{smallText(filepath.Join(dir, "missing")), "no such file"},
		{[]string{"train", "mnist", "--data", dir}, "lacks train-images"},
		{[]string{"train", "mnist", "--epochs", "0"}, "--epochs must be"},
		{[]string{"train", "mnist", "--steps", "5", "--epochs", "2"}, "not both"},
		{[]string{"train", "text", "--device", "meta"}, "computes no values"},
		{[]string{"train", "text", "--device", "cuda:99"}, "ferry doctor"},
		{[]string{"sample"}, "give --checkpoint-dir"},
		{[]string{"sample", "--checkpoint-dir", dir}, "holds no checkpoint"},
		{[]string{"sample", "--checkpoint-dir", dir, "--top-k", "0"}, "--top-k"},
		{[]string{"train"}, "usage: ferry train"},
		{[]string{"train", "imagenet"}, "unknown command"},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		if (code != 1 && code != 2) || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "panic") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 or 2 and %q", c.args, code, firstLine(out), errOut, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
}

// Every registered language family trains text in every memory mode to
// the bits of mode none (the Llama family included, recompute per block).
func TestTrainTextEveryFamilyEveryMode(t *testing.T) {
	if testing.Short() {
		t.Skip("trains each family in each mode")
	}
	data := corpus(t)
	dir := t.TempDir()
	for _, fam := range models.Names(isLanguage) {
		var logs []map[int]float64
		for _, mode := range trainModes {
			log := filepath.Join(dir, fam+"-"+mode+".jsonl")
			args := smallText(data, "--model", fam, "--steps", "3", "--mode", mode, "--log", log)
			if mode == "offload-disk" { // --disk-dir is its disk tier
				args = append(args, "--disk-dir", dir)
			}
			if fam != "gpt" { // the GPT's dropout flag sizes no other family
				for i := range args {
					if args[i] == "--dropout" {
						args = append(args[:i], args[i+2:]...)
						break
					}
				}
			}
			if out, errOut, code := runCLI(t, args...); code != 0 {
				t.Fatalf("%s %s: exit %d\n%s%s", fam, mode, code, out, errOut)
			}
			logs = append(logs, logLosses(t, log))
		}
		for i, mode := range trainModes[1:] {
			sameBits(t, fam+" "+mode, logs[0], logs[i+1], 3)
		}
	}
}
