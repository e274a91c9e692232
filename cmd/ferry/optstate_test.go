package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// --optimizer-state host trains bit for bit as device: the same losses,
// parameters and optimizer checkpoint; a run stopped with the state on
// the host resumes with it on the device (and the reverse) to the same
// files; and a bad value is refused by name.
func TestTrainOptimizerStateHost(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	args := func(ck, state string, extra ...string) []string {
		return smallText(data, append([]string{"--steps", "4", "--eval-every", "2", "--checkpoint-dir", ck,
			"--log", ck + ".jsonl", "--optimizer-state", state}, extra...)...)
	}
	runs := map[string][]string{
		"device": args(filepath.Join(dir, "device"), "device"),
		"host":   append(args(filepath.Join(dir, "host"), "host"), "--json"),
	}
	for name, a := range runs {
		out, errOut, code := runCLI(t, a...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
		if name == "host" {
			var sum map[string]any
			if err := json.Unmarshal([]byte(out), &sum); err != nil || sum["optimizer_state"] != "host" {
				t.Errorf("--json: optimizer_state %v (%v)", sum["optimizer_state"], err)
			}
			if b, _ := sum["host_optimizer_state_bytes"].(float64); b <= 0 {
				t.Errorf("--json: host_optimizer_state_bytes %v", sum["host_optimizer_state_bytes"])
			}
		}
	}
	ref := filepath.Join(dir, "device")
	sameBits(t, "host", logLosses(t, ref+".jsonl"), logLosses(t, filepath.Join(dir, "host")+".jsonl"), 4)
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		sameFile(t, filepath.Join(ref, "step-00000004", f), filepath.Join(dir, "host", "step-00000004", f))
	}
	for _, c := range [][2]string{{"host", "device"}, {"device", "host"}} {
		ck := filepath.Join(dir, c[0]+"-then-"+c[1])
		if out, errOut, code := runCLI(t, args(ck, c[0], "--stop-after", "2")...); code != 0 {
			t.Fatalf("%v first half: exit %d\n%s%s", c, code, out, errOut)
		}
		if out, errOut, code := runCLI(t, args(ck, c[1], "--resume")...); code != 0 || !strings.Contains(out, "resumed from") {
			t.Fatalf("%v resumed half: exit %d\n%s%s", c, code, out, errOut)
		}
		for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
			sameFile(t, filepath.Join(ref, "step-00000004", f), filepath.Join(ck, "step-00000004", f))
		}
	}
	_, errOut, code := runCLI(t, smallText(data, "--optimizer-state", "gpu")...)
	if code != 2 && code != 1 || !strings.Contains(errOut, `--optimizer-state "gpu": want device or host`) {
		t.Errorf("--optimizer-state gpu: exit %d, %s", code, errOut)
	}
}
