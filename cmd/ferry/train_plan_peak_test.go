package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
)

// A planned run peaks as predicted, its validations included: ferry plan
// --out p.json, then train text --policy p.json validating at step 0,
// every --eval-every steps and at the end. The run's device peak over
// all of that (peak_bytes) is the plan's predicted peak to the byte,
// within the budget, whatever --val-batches is: the validation batches
// wait in host memory and go to the device one at a time, for their own
// forward, as a training batch does. (They stayed on the device for the
// whole run, 1 KiB each at this size, above the plan: 16 of them took the
// run 16 KiB past the prediction and 8 KiB past the budget.)
//
// The plan keeps the training state on the device: the offloader's
// placements alone decide the step, and the CPU allocates what the meta
// device does.
func TestPlannedRunPeaksAsPredictedWithValidation(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "p.json")
	p, out := planPolicy(t, "plan", "--model", "gpt", "--vocab", "256", "--seq", "16", "--layers", "2", "--heads", "2",
		"--embd", "32", "--batch", "4", "--dropout", "0.1", "--optimizer-state", "device", "--gradients", "device", "--parameters", "device",
		"--budget", "600KiB", "--profile", "cpu", "--out", policy, "--json")
	if !p.Fits || p.Counts.Host == 0 || p.Predicted.PeakBytes > p.Budget {
		t.Fatalf("want a plan that moves saved tensors to fit %d bytes: %s", p.Budget, out)
	}
	for _, vb := range []int{1, 16} {
		peak := validatedPolicyPeak(t, fmt.Sprintf("--val-batches %d: ", vb), "train", "text", "--data", data, "--layers", "2", "--heads", "2", "--embd", "32", "--seq", "16",
			"--batch", "4", "--dropout", "0.1", "--sample", "0", "--steps", "4", "--eval-every", "2",
			"--val-batches", strconv.Itoa(vb), "--policy", policy, "--checkpoint-dir", filepath.Join(dir, "run"+strconv.Itoa(vb)))
		if peak != p.Predicted.PeakBytes {
			t.Errorf("--val-batches %d: measured peak %d bytes, the plan predicted %d (%+d)", vb, peak, p.Predicted.PeakBytes, peak-p.Predicted.PeakBytes)
		}
		if peak > p.Budget {
			t.Errorf("--val-batches %d: measured peak %d bytes, over the budget of %d the plan was made for", vb, peak, p.Budget)
		}
	}
}

// A planned run that streams the training state from host memory peaks
// as predicted too: every parameter lives on the host and comes to the
// device around its uses, gradients and the optimizer's state go to the
// host (ferry plan --parameters host --gradients host --optimizer-state
// host), in float32 and in bfloat16, and train text --policy validates at
// step 0, every --eval-every steps and at the end. The run's peak is the
// plan's prediction to the byte. (Validation's forwards were recorded as
// the streamer's order of uses, which the next step's prefetches follow:
// the first step after one prefetched parameters in forward's order
// during backward, which stayed on the device unused. At 300 KiB the run
// peaked at 292,352 bytes for a prediction of 261,120 in float32, and
// 321,536 for 269,824 in bfloat16.)
func TestPlannedHostStreamedRunPeaksAsPredicted(t *testing.T) {
	data := corpus(t)
	model := []string{"--layers", "2", "--heads", "2", "--embd", "32", "--seq", "16", "--batch", "4", "--dropout", "0.1"}
	for _, prec := range []string{"fp32", "bf16"} {
		t.Run(prec, func(t *testing.T) {
			dir := t.TempDir()
			policy := filepath.Join(dir, "p.json")
			args := append([]string{"plan", "--model", "gpt", "--vocab", "256"}, model...)
			args = append(args, "--precision", prec, "--parameters", "host", "--gradients", "host", "--optimizer-state", "host",
				"--budget", "300KiB", "--profile", "cpu", "--out", policy, "--json")
			p, out := planPolicy(t, args...)
			if !p.Fits || len(p.ParamsOnHost) == 0 || p.Gradients != "host" || p.OptimizerState != "host" || p.Predicted.PeakBytes > p.Budget {
				t.Fatalf("want a plan that fits %d bytes with the training state in host memory: %s", p.Budget, out)
			}
			args = append([]string{"train", "text", "--data", data}, model...)
			args = append(args, "--precision", prec, "--sample", "0", "--steps", "4", "--eval-every", "2", "--val-batches", "4",
				"--policy", policy, "--checkpoint-dir", filepath.Join(dir, "run"))
			if peak := validatedPolicyPeak(t, "", args...); peak != p.Predicted.PeakBytes {
				t.Errorf("measured peak %d bytes, the plan predicted %d (%+d)", peak, p.Predicted.PeakBytes, peak-p.Predicted.PeakBytes)
			}
		})
	}
}

// plannedPolicy is what these tests read of ferry plan --json.
type plannedPolicy struct {
	Fits           bool     `json:"fits"`
	Budget         int64    `json:"budget_bytes"`
	ParamsOnHost   []string `json:"parameters_on_host"`
	Gradients      string   `json:"gradients"`
	OptimizerState string   `json:"optimizer_state"`
	Predicted      struct {
		PeakBytes int64 `json:"peak_bytes"`
	} `json:"predicted"`
	Counts struct {
		Host int `json:"host"`
	} `json:"placements"`
}

// planPolicy runs ferry plan with args (which give --json) and returns
// its figures and its output.
func planPolicy(t *testing.T, args ...string) (plannedPolicy, string) {
	t.Helper()
	out, errOut, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errOut)
	}
	var p plannedPolicy
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	return p, out
}

// validatedPolicyPeak runs train text with args (a --policy run), checks
// that it ran mode policy and validated, and returns its peak_bytes; what
// prefixes its failures.
func validatedPolicyPeak(t *testing.T, what string, args ...string) int64 {
	t.Helper()
	sum := runJSON(t, args...)
	if sum["mode"] != "policy" || sum["initial_val_loss"] == nil || sum["final_val_loss"] == nil {
		t.Fatalf("%swant a policy run that validated: mode %v, initial_val_loss %v, final_val_loss %v",
			what, sum["mode"], sum["initial_val_loss"], sum["final_val_loss"])
	}
	return int64(num(t, sum, "peak_bytes"))
}
