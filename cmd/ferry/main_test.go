package main

import (
	"ferry/cmd/ferry/internal/demo"

	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestDemoPrintsTheOriginLines(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "--device", "meta", "--steps", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Testing with none:",
		"Memory allocated before forward pass: 2576.62 MiB",
		"Memory allocated after forward pass: 3216.62 MiB",
		"Max memory allocated during forward pass: 3232.62 MiB",
		"Testing with naive:", `Why "naive" saves nothing`,
		"Testing with save-on-host:", "Testing with offload:", "Testing with offload-disk:",
		// meta keeps no time: nothing looks measured, and the peak is explained.
		"meta keeps no time", "step - s · loss n/a", "the step peak is about the same in every mode",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoJSON(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "--device", "cpu", "--layers", "3", "--width", "64", "--batch", "16", "--steps", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Device string `json:"device"`
		Layers int    `json:"layers"`
		Runs   []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.Device != "cpu" || res.Layers != 3 || len(res.Runs) != len(demo.AllModes) {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Runs {
		for _, k := range []string{"mode", "before_forward_bytes", "after_forward_bytes", "peak_forward_bytes", "peak_step_bytes",
			"step_seconds", "loss", "grads_equal_none", "offloaded_bytes", "stall_seconds", "clock"} {
			if k == "clock" && r[k] != "measured" {
				t.Errorf("run %v on cpu: clock %v, want measured", r["mode"], r[k])
			}
			if _, ok := r[k]; !ok {
				t.Errorf("run %v lacks %q", r["mode"], k)
			}
		}
		if r["grads_equal_none"] != true {
			t.Errorf("%v: gradients differ from none's", r["mode"])
		}
	}
}

func TestPlanWritesAReplayablePolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	out, errOut, code := runCLI(t, "plan", "--layers", "8", "--width", "512", "--batch", "256", "--budget", "16MiB", "--out", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Fits      bool `json:"fits"`
		Predicted struct {
			PeakBytes int64 `json:"peak_bytes"`
		} `json:"predicted"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Fits || p.Predicted.PeakBytes > 16<<20 {
		t.Fatalf("%s", out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(t, "demo", "--device", "meta", "--profile", "h200-pcie5", "--layers", "8", "--width", "512", "--batch", "256",
		"--modes", "policy", "--steps", "1", "--policy", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var d struct {
		Runs []struct {
			PeakStepBytes int64 `json:"peak_step_bytes"`
		}
	}
	json.Unmarshal([]byte(out), &d)
	if len(d.Runs) != 1 || d.Runs[0].PeakStepBytes != p.Predicted.PeakBytes {
		t.Fatalf("replayed %+v, predicted %d", d, p.Predicted.PeakBytes)
	}
	// Too small: says so, writes nothing, and exits non-zero.
	out, _, code = runCLI(t, "plan", "--layers", "8", "--width", "512", "--batch", "256", "--budget", "4MiB")
	if code != 1 || !strings.Contains(out, "Nothing fits") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestErrorsAreClear(t *testing.T) {
	_, errOut, code := runCLI(t, "demo", "--device", "tpu")
	if code == 0 || !strings.Contains(errOut, "no driver for \"tpu\"") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "demo", "--modes", "fast")
	if code == 0 || !strings.Contains(errOut, "unknown mode") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	out, _, code := runCLI(t, "demo", "--device", "meta", "--capacity", "1GiB", "--json", "--steps", "1")
	if code == 0 || !strings.Contains(out, "out of memory") {
		t.Errorf("exit %d: %s", code, out)
	}
	_, errOut, code = runCLI(t, "nonsense")
	if code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestDoctor(t *testing.T) {
	out, _, code := runCLI(t, "doctor", "--json")
	if code != 0 {
		t.Fatal(code)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if _, ok := r["cuda"]; !ok {
		t.Fatalf("%s", out)
	}
}

func TestDemoGPT(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "--model", "gpt", "--device", "cpu", "--layers", "2", "--heads", "2", "--embd", "32",
		"--seq", "16", "--vocab", "40", "--batch", "2", "--steps", "1", "--dropout", "0.1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Model          string `json:"model"`
		ParameterCount int64  `json:"parameter_count"`
		Runs           []struct {
			Mode           string `json:"mode"`
			GradsEqualNone *bool  `json:"grads_equal_none"`
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// 40·32 + 16·32 + 2·(64 + 32·96+96 + 32·32+32 + 64 + 32·128+128 + 128·32+32) + 64
	if res.Model != "gpt" || res.ParameterCount != 27264 || len(res.Runs) != len(demo.AllModes)-1 {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Runs {
		if r.GradsEqualNone == nil || !*r.GradsEqualNone {
			t.Errorf("%s: gradients differ from none's", r.Mode)
		}
	}
	_, errOut, code = runCLI(t, "demo", "--model", "gpt", "--device", "meta", "--heads", "5", "--steps", "1")
	if code == 0 || !strings.Contains(errOut, "multiple") {
		t.Errorf("768 wide with 5 heads: exit %d, %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "demo", "--embd", "64")
	if code == 0 || !strings.Contains(errOut, "--embd: no such size for --model mlp") {
		t.Errorf("--embd without --model gpt: exit %d, %s", code, errOut)
	}
}

// ferry calibrate --model gpt refuses bad sizes before it measures anything.
func TestCalibrateGPTFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "gpt", "--heads", "5"}, "not a multiple"},
		{[]string{"--model", "gpt", "--embd", "0"}, "--embd must be a whole number"},
		{[]string{"--model", "gpt", "--seq", "-4"}, "--seq must be a whole number"},
		{[]string{"--model", "gpt", "--batch", "0"}, "--batch must be a whole number"},
		{[]string{"--model", "gpt", "--width", "512"}, "--width: no such size for --model gpt"},
		{[]string{"--heads", "2"}, "add --model (gpt, llama, mlp)"},
		{[]string{"--model", "bert"}, "choose gpt, llama, mlp"},
	} {
		_, errOut, code := runCLI(t, append([]string{"calibrate"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("calibrate %v: exit %d, %q; want an error with %q", c.args, code, errOut, c.want)
		}
	}
}
