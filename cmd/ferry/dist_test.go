package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// mpiFerry returns mpirun's path and a ferry binary built once for the
// tests that start ranks (go build takes a while on a small machine);
// it skips t in -short mode or without Open MPI.
func mpiFerry(t *testing.T) (mpirun, bin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds ferry and starts mpirun")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("Open MPI is absent (no mpirun on PATH); install the libopenmpi3 and openmpi-bin packages to run this test")
	}
	buildOnce.Do(func() {
		bin := filepath.Join(os.Getenv("FERRY_TEST_RUNS"), "ferry-bin")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return mpirun, builtBin
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	// As dist/internal/mpirun starts jobs: shared memory and loopback TCP.
	mpirunFlags    = []string{"--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader,tcp", "--mca", "pml", "ob1"}
	mpiTimeout     = 3 * time.Minute // a job that has not ended by then hangs
	errMPIJobHangs = errors.New("the job did not end")
)

// mpiJob runs mpirun with args in dir and returns stdout, stderr, how
// long it took and its error; a job still running after mpiTimeout is
// killed and reported as errMPIJobHangs.
func mpiJob(t *testing.T, dir string, args ...string) (stdout, stderr string, took time.Duration, err error) {
	t.Helper()
	mpirun, _ := mpiFerry(t)
	ctx, cancel := context.WithTimeout(context.Background(), mpiTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, append(append([]string{}, mpirunFlags...), args...)...)
	cmd.Dir = dir
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	t0 := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = errMPIJobHangs
	}
	return o.String(), e.String(), time.Since(t0), err
}

// mpirun -np 2 ferry train text at --batch 4 trains as one process at
// --batch 8, dropout on (each rank draws the masks one process draws for
// its rows): the same losses up to float32 rounding of the reduction, with
// the ranks' parameters checked bit-identical after every step
// (--check-every 1), and only rank 0 writing. It validates as that process
// too: each rank evaluates its 4 rows of each batch of 8 the process
// draws, and the job reports the process's validation loss within 1e-5.
// Without --checkpoint-dir, the job saves its model as the process does,
// in one run directory that rank 0 made.
func TestTrainTextOnTwoMPIRanks(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	data := corpus(t)
	dp, sp := filepath.Join(dir, "dp.jsonl"), filepath.Join(dir, "sp.jsonl")
	args := func(batch, log string) []string {
		a := smallText(data, "--steps", "12", "--eval-every", "6", "--log", log, "--json", "--check-every", "1", "--dropout", "0.1")
		a[13] = batch // --batch
		return a
	}
	out, stderr, _, err := mpiJob(t, dir, append([]string{"-np", "2", bin}, args("4", dp)...)...)
	if err != nil {
		t.Fatalf("mpirun: %v\n%s%s", err, out, stderr)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum["world_size"] != 2.0 || sum["steps"] != 12.0 {
		t.Fatalf("stdout is not rank 0's one summary of 2 ranks: %v\n%s", err, out)
	}
	one, errOut, code := runCLI(t, args("8", sp)...)
	if code != 0 {
		t.Fatalf("one process: %s", errOut)
	}
	var sum1 map[string]any
	if err := json.Unmarshal([]byte(one), &sum1); err != nil {
		t.Fatal(err)
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
	for _, k := range []string{"initial_val_loss", "final_val_loss"} {
		v2, ok2 := sum[k].(float64)
		v1, ok1 := sum1[k].(float64)
		t.Logf("%s: 2 ranks at batch 4 %.7f, 1 process at batch 8 %.7f", k, v2, v1)
		if !ok1 || !ok2 || math.Abs(v2-v1) > 1e-5 {
			t.Errorf("%s: 2 ranks %v, 1 process %v", k, sum[k], sum1[k])
		}
	}
	ck, _ := sum["checkpoint_dir"].(string)
	if sum["run_dir_created"] != true || !strings.HasPrefix(ck, "runs"+string(filepath.Separator)) {
		t.Fatalf("the job saved no run directory: checkpoint_dir %q", ck)
	}
	if _, err := os.Stat(filepath.Join(dir, sum["checkpoint"].(string), "model.safetensors")); err != nil {
		t.Errorf("the job's model: %v", err)
	}
	if runs, _ := os.ReadDir(filepath.Join(dir, "runs")); len(runs) != 1 {
		t.Errorf("run directories %v, want rank 0's alone", runs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 { // runs and the two logs: rank 1 wrote nothing
		t.Errorf("files: %v", ents)
	}
}

// Under mpirun the optimizer's state may live in host memory: at ZeRO-1
// each rank's share does, and the job trains to the losses of the state on
// the device, bit for bit. A job stopped right after a checkpoint
// (--stop-after at a --checkpoint-every step, whose checkpoint is proven
// at the end, a collective) ends, where it once hung with only rank 0 in
// the proof; resumed, it ends where the uninterrupted job did.
func TestStateOnHostAcrossRanksStopsAndResumes(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	data := corpus(t)
	job := func(state, ck string, extra ...string) (float64, error) {
		args := smallText(data, append([]string{"--steps", "6", "--zero", "1", "--optimizer-state", state,
			"--checkpoint-dir", filepath.Join(dir, ck), "--checkpoint-every", "3", "--json",
			"--collective-timeout", "20s"}, extra...)...) // a hang fails in seconds
		out, stderr, took, err := mpiJob(t, dir, append([]string{"-np", "2", bin}, args...)...)
		if err != nil {
			return 0, fmt.Errorf("%v after %v: %s%s", err, took, out, stderr)
		}
		var sum struct {
			Loss float64 `json:"final_train_loss"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			return 0, fmt.Errorf("summary: %v: %s", err, out)
		}
		return sum.Loss, nil
	}
	host, err := job("host", "host")
	if err != nil {
		t.Fatal(err)
	}
	device, err := job("device", "device")
	if err != nil {
		t.Fatal(err)
	}
	if host != device {
		t.Errorf("final train loss %v with the state on the host, %v on the device", host, device)
	}
	if _, err := job("host", "stopped", "--stop-after", "3"); err != nil {
		t.Fatalf("stopped after the step-3 checkpoint: %v", err)
	}
	resumed, err := job("host", "stopped", "--resume")
	if err != nil {
		t.Fatal(err)
	}
	if resumed != host {
		t.Errorf("resumed from step 3: final train loss %v, uninterrupted %v", resumed, host)
	}
}

// ZeRO-3 (--zero 3) on 2 MPI ranks trains exactly as ZeRO-0 at the same
// ranks: the same losses at every step, the same validation loss, and a
// byte-identical model file, for a GPT with dropout and a Llama, each in
// fp32 and in bf16 (ZeRO-3 gathering bfloat16 copies of the weights),
// all clipping and accumulating 2 micro-batches. Against one process at
// twice the batch, the fp32 runs' losses are within 1e-5.
func TestZeRO3OnTwoMPIRanks(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	data := corpus(t)
	type summary struct {
		Val   float64 `json:"final_val_loss"`
		Train float64 `json:"final_train_loss"`
		Ckpt  string  `json:"checkpoint"`
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"gpt-fp32", []string{"--dropout", "0.1"}},
		{"gpt-bf16", []string{"--dropout", "0.1", "--precision", "bf16"}},
		{"llama-fp32", []string{"--model", "llama"}},
		{"llama-bf16", []string{"--model", "llama", "--precision", "bf16"}},
	} {
		args := func(zero, batch, name string) []string {
			a := []string{"train", "text", "--data", data, "--layers", "2", "--heads", "2", "--embd", "32", "--seq", "16",
				"--batch", batch, "--val-batches", "2", "--sample", "0", "--steps", "6", "--clip", "1", "--accum", "2",
				"--log", filepath.Join(dir, name+".jsonl"), "--checkpoint-dir", filepath.Join(dir, name), "--json",
				"--collective-timeout", "30s"}
			if zero != "" {
				a = append(a, "--zero", zero)
			}
			return append(a, tc.extra...)
		}
		sums := map[string]summary{}
		for _, zero := range []string{"0", "3"} {
			name := tc.name + "-zero" + zero
			out, stderr, took, err := mpiJob(t, dir, append([]string{"-np", "2", bin}, args(zero, "4", name)...)...)
			if err != nil {
				t.Fatalf("%s: %v after %v\n%s%s", name, err, took, out, stderr)
			}
			var s summary
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("%s: %v: %s", name, err, out)
			}
			sums[zero] = s
		}
		z0, z3 := logLosses(t, filepath.Join(dir, tc.name+"-zero0.jsonl")), logLosses(t, filepath.Join(dir, tc.name+"-zero3.jsonl"))
		if len(z0) != 6 || len(z3) != 6 {
			t.Fatalf("%s: %d and %d logged losses, want 6", tc.name, len(z0), len(z3))
		}
		for step, l := range z0 {
			if z3[step] != l {
				t.Errorf("%s, step %d: loss %v at ZeRO-3, %v at ZeRO-0", tc.name, step, z3[step], l)
			}
		}
		if sums["3"].Val != sums["0"].Val {
			t.Errorf("%s: final val loss %v at ZeRO-3, %v at ZeRO-0", tc.name, sums["3"].Val, sums["0"].Val)
		}
		m0, err0 := os.ReadFile(filepath.Join(sums["0"].Ckpt, "model.safetensors"))
		m3, err3 := os.ReadFile(filepath.Join(sums["3"].Ckpt, "model.safetensors"))
		if err0 != nil || err3 != nil || !bytes.Equal(m0, m3) {
			t.Errorf("%s: the models differ between ZeRO-0 and ZeRO-3 (%v, %v)", tc.name, err0, err3)
		}
		t.Logf("%s: final train loss %.7f, val %.7f at ZeRO-0 and ZeRO-3", tc.name, sums["3"].Train, sums["3"].Val)
		if !strings.HasSuffix(tc.name, "-fp32") {
			continue
		}
		out, errOut, code := runCLI(t, args("", "8", tc.name+"-one")...)
		if code != 0 {
			t.Fatalf("one process: %s", errOut)
		}
		var one summary
		if err := json.Unmarshal([]byte(out), &one); err != nil {
			t.Fatal(err)
		}
		single := logLosses(t, filepath.Join(dir, tc.name+"-one.jsonl"))
		var worst float64
		for step, l := range single {
			worst = max(worst, math.Abs(z3[step]-l))
		}
		t.Logf("%s: largest loss difference between 2 ZeRO-3 ranks at batch 4 and 1 process at batch 8: %.3g; val %.7f and %.7f", tc.name, worst, sums["3"].Val, one.Val)
		if worst > 1e-5 || math.Abs(one.Val-sums["3"].Val) > 1e-5 {
			t.Errorf("%s: one process at twice the batch differs: losses by %v, val %v against %v", tc.name, worst, one.Val, sums["3"].Val)
		}
	}
}

// A ZeRO-3 rank's plan is what the rank runs: ferry plan --ranks 2 --zero
// 3 writes a policy that offloads, and mpirun -np 2 ferry train --zero 3
// --policy peaks at the predicted bytes exactly (every rank, on the CPU),
// the state on the device at 600 KiB; with it on the host at 300 KiB the
// plan may step each shard beside the device as its mean gradient lands
// (optimizer_in_backward: the `cpu` profile's choice by time), and at
// 250 KiB keeps the shards in host memory too (--parameters host). All train to ZeRO-0's losses, bit for bit.
func TestZeRO3PolicyPeakOnTwoMPIRanks(t *testing.T) {
	_, bin := mpiFerry(t)
	dir := t.TempDir()
	data := corpus(t)
	shape := []string{"--layers", "2", "--heads", "2", "--embd", "32", "--seq", "16", "--batch", "4"}
	trainArgs := append([]string{"-np", "2", bin, "train", "text", "--data", data}, shape...)
	trainArgs = append(trainArgs, "--val-batches", "2", "--sample", "0", "--steps", "4", "--json", "--collective-timeout", "30s")
	type summary struct {
		Peak  int64   `json:"peak_bytes"`
		Train float64 `json:"final_train_loss"`
		Val   float64 `json:"final_val_loss"`
		State string  `json:"optimizer_state"`
	}
	runJob := func(extra ...string) summary {
		t.Helper()
		job, stderr, took, err := mpiJob(t, dir, append(append([]string{}, trainArgs...), extra...)...)
		if err != nil {
			t.Fatalf("%v after %v: %s%s", err, took, job, stderr)
		}
		var ran summary
		if err := json.Unmarshal([]byte(job), &ran); err != nil {
			t.Fatal(err)
		}
		return ran
	}
	zero := runJob("--zero", "0")
	for _, tc := range []struct{ state, params, budget string }{{"device", "device", "600KiB"}, {"host", "device", "300KiB"}, {"host", "host", "250KiB"}} {
		state := tc.state
		policy := filepath.Join(dir, "z3-"+state+"-"+tc.params+".json")
		args := append([]string{"plan", "--model", "gpt"}, shape...)
		args = append(args, "--vocab", "256", "--budget", tc.budget, "--ranks", "2", "--zero", "3", "--profile", "cpu",
			"--optimizer-state", state, "--parameters", tc.params, "--out", policy, "--json")
		out, errOut, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("plan: %s", errOut)
		}
		var planned struct {
			InBackward bool     `json:"optimizer_in_backward"`
			OnHost     []string `json:"parameters_on_host"`
			Predicted  struct {
				Peak int64 `json:"peak_bytes"`
			} `json:"predicted"`
		}
		if err := json.Unmarshal([]byte(out), &planned); err != nil || planned.Predicted.Peak == 0 {
			t.Fatalf("plan: %v: %s", err, out)
		}
		// (Stepping beside the device is the planner's choice by time
		// with the state on the host; with it on the device a rank of
		// several cannot update inside backward.)
		if planned.InBackward && state == "device" || (len(planned.OnHost) > 0) != (tc.params == "host") {
			t.Errorf("state on the %s, parameters on the %s: the plan's optimizer_in_backward is %v, its parameters on the host %v", state, tc.params, planned.InBackward, planned.OnHost)
		}
		ran := runJob("--zero", "3", "--policy", policy)
		t.Logf("ZeRO-3 rank of 2 under a %s policy, state on the %s, shards on the %s: planned %d bytes, trained %d; final losses %.7f, %.7f (ZeRO-0: %.7f, %.7f)",
			tc.budget, state, tc.params, planned.Predicted.Peak, ran.Peak, ran.Train, ran.Val, zero.Train, zero.Val)
		if ran.Peak != planned.Predicted.Peak {
			t.Errorf("state on the %s: the job peaked at %d bytes, the plan predicted %d", state, ran.Peak, planned.Predicted.Peak)
		}
		if ran.State != state || ran.Train != zero.Train || ran.Val != zero.Val {
			t.Errorf("state on the %s: the job kept it on the %s and trained to %v, %v; ZeRO-0 to %v, %v", state, ran.State, ran.Train, ran.Val, zero.Train, zero.Val)
		}
	}
}
