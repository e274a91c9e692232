package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ferry plan --optimizer-state host plans with AdamW's moments off the
// device: a GPT that does not fit a budget with them fits without, the
// host plan is suggested when nothing fits, the policy records the
// placement, `ferry demo --policy` replays it to the byte, and demo and
// train refuse a flag that contradicts it.
func TestPlanOptimizerStateHost(t *testing.T) {
	dir := t.TempDir()
	gpt := []string{"--model", "gpt", "--layers", "2", "--heads", "2", "--embd", "64", "--seq", "32", "--vocab", "512", "--batch", "2"}
	type planOut struct {
		Fits           bool     `json:"fits"`
		OptimizerState string   `json:"optimizer_state"`
		Suggestions    []string `json:"suggestions"`
		Predicted      struct {
			PeakBytes   int64   `json:"peak_bytes"`
			StepSeconds float64 `json:"step_seconds"`
		} `json:"predicted"`
		Unlimited struct {
			PeakBytes int64 `json:"peak_bytes"`
		} `json:"unlimited"`
	}
	planned := func(args ...string) (planOut, int) {
		t.Helper()
		out, errOut, code := runCLI(t, append(append([]string{"plan"}, gpt...), append(args, "--json")...)...)
		var p planOut
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("exit %d: %v\n%s%s", code, err, out, errOut)
		}
		return p, code
	}
	dev, _ := planned("--budget", "1GiB", "--optimizer-state", "device")
	host, _ := planned("--budget", "1GiB", "--optimizer-state", "host")
	if dev.OptimizerState != "device" || host.OptimizerState != "host" {
		t.Fatalf("optimizer_state %q and %q", dev.OptimizerState, host.OptimizerState)
	}
	// GPT parameters: AdamW's two moments, 8 bytes a parameter, leave.
	const params = 2*(64*192+192+64*64+64+64*256+256+256*64+64+4*64) + 512*64 + 32*64 + 2*64
	if saved := dev.Unlimited.PeakBytes - host.Unlimited.PeakBytes; saved < 8*params {
		t.Errorf("the host plan's peak is %d bytes below the device plan's, want at least the moments' %d", saved, 8*params)
	}
	// A budget between the two: only the host plan fits; the device plan
	// says so, and auto (the default) takes the host plan.
	budget := itoa((dev.Unlimited.PeakBytes + host.Unlimited.PeakBytes) / 2)
	noFit, code := planned("--budget", budget, "--no-disk", "--host-budget", "1", "--optimizer-state", "device")
	if code == 0 || noFit.Fits {
		t.Fatalf("the device plan fits %s: %+v", budget, noFit)
	}
	if len(noFit.Suggestions) == 0 || !strings.Contains(strings.Join(noFit.Suggestions, "\n"), "--optimizer-state host") {
		t.Errorf("suggestions %q do not offer the host state", noFit.Suggestions)
	}
	if auto, code := planned("--budget", budget, "--no-disk", "--host-budget", "1"); code != 0 || !auto.Fits || auto.OptimizerState != "host" {
		t.Errorf("auto at %s: exit %d, fits %v, state %q; want the host plan", budget, code, auto.Fits, auto.OptimizerState)
	}
	if auto, _ := planned("--budget", "1GiB"); auto.OptimizerState != "device" {
		t.Errorf("auto where the device fits: state %q, want device", auto.OptimizerState)
	}
	path := filepath.Join(dir, "host.json")
	hp, code := planned("--budget", budget, "--optimizer-state", "host", "--out", path)
	if code != 0 || !hp.Fits {
		t.Fatalf("the host plan does not fit %s: %+v", budget, hp)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), `"optimizer_state": "host"`) {
		t.Fatalf("policy (%v):\n%s", err, b)
	}
	// The replay takes the state from the policy and peaks as predicted.
	out, errOut, code := runCLI(t, "demo", "--device", "meta", "--profile", "h200-pcie5", "--modes", "policy", "--steps", "1", "--policy", path, "--json")
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}
	var d struct {
		Runs []struct {
			PeakStepBytes int64   `json:"peak_step_bytes"`
			StepSeconds   float64 `json:"step_seconds"`
		}
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Runs) != 1 || d.Runs[0].PeakStepBytes != hp.Predicted.PeakBytes {
		t.Fatalf("replayed %+v (%v), predicted peak %d", d, err, hp.Predicted.PeakBytes)
	}
	// The demo's step runs through the Trainer, a kernel launch or two
	// beyond the planner's (5 µs each on this profile), as with the state
	// on the device.
	if diff := d.Runs[0].StepSeconds - hp.Predicted.StepSeconds; diff < 0 || diff > 10e-6 {
		t.Errorf("replayed step %v s, predicted %v s", d.Runs[0].StepSeconds, hp.Predicted.StepSeconds)
	}
	// Contradicting flags are refused, by name.
	_, errOut, code = runCLI(t, "demo", "--device", "meta", "--modes", "policy", "--steps", "1", "--policy", path, "--optimizer-state", "device")
	if code == 0 || !strings.Contains(errOut, "planned with the optimizer state on the host") {
		t.Errorf("demo with --optimizer-state device: exit %d: %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "train", "text", "--data", corpus(t), "--policy", path, "--optimizer-state", "device", "--steps", "1")
	if code == 0 || !strings.Contains(errOut, "planned with the optimizer state on the host") {
		t.Errorf("train with --optimizer-state device: exit %d: %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "plan", "--budget", "1GiB", "--optimizer-state", "gpu")
	if code == 0 || !strings.Contains(errOut, "want device, host or auto") {
		t.Errorf("--optimizer-state gpu: exit %d: %s", code, errOut)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
