package main

import (
	"encoding/json"
	"strings"
	"testing"

	"ferry/device/meta"
)

// Where the device multiplies no bfloat16 (the CPU device, until it
// does), calibrate says so in its human and its JSON output and leaves
// matmul_bf16_flops out of the profile; where it does, it gives the rate.
func TestCalibrateBF16Output(t *testing.T) {
	if testing.Short() {
		t.Skip("short: times the CPU and a 256 MiB file")
	}
	args := []string{"calibrate", "--device", "cpu", "--seconds", "0.01", "--width", "32", "--batch", "16", "--disk-dir", t.TempDir()}
	out, errOut, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("calibrate: exit %d: %s", code, errOut)
	}
	// Each phase is announced on stderr as it starts.
	for _, want := range []string{"calibrate: timing matrix products", "calibrate: timing disk", "calibrate: timing training steps"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	human := strings.Contains(out, "bfloat16 products not measured")
	if !human && !strings.Contains(out, "bfloat16 products ") {
		t.Errorf("no bfloat16 line in:\n%s", out)
	}
	out, errOut, code = runCLI(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("calibrate --json: exit %d: %s", code, errOut)
	}
	var p meta.Profile
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	if skipped := strings.Contains(p.Source, "bfloat16 products not measured ("); skipped != (p.MatmulBF16FLOPS == 0) || skipped != human {
		t.Errorf("matmul_bf16_flops %v with source %q (human output said not measured: %v)", p.MatmulBF16FLOPS, p.Source, human)
	}
	if p.MatmulBF16FLOPS == 0 && strings.Contains(out, "matmul_bf16_flops") {
		t.Errorf("an unmeasured matmul_bf16_flops in:\n%s", out)
	}
}
