package plan

import (
	"strings"
	"testing"
)

// Every built-in profile is valid; the GPUs' bfloat16 products run on
// their tensor cores, well past the FP32 rate; the CPUs' are measured by
// ferry calibrate (since the 2026-12-06 refit; before, unmeasured, they
// fell back to the FP32 rate) and no tensor-core rate, and their host is
// the device.
func TestBuiltinProfiles(t *testing.T) {
	for _, name := range Profiles() {
		p, err := LoadProfile(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		gpu := !strings.HasPrefix(name, "cpu")
		switch {
		case gpu && p.MatmulBF16FLOPS < 10*p.MatmulFLOPS:
			t.Errorf("%s: matmul_bf16_flops %g is not a tensor-core rate (matmul_flops %g)", name, p.MatmulBF16FLOPS, p.MatmulFLOPS)
		case !gpu && (p.MatmulBF16FLOPS >= 10*p.MatmulFLOPS || !strings.Contains(p.Source, "ferry calibrate")):
			t.Errorf("%s: matmul_bf16_flops %g (matmul_flops %g) not a CPU's measured rate (source %q)", name, p.MatmulBF16FLOPS, p.MatmulFLOPS, p.Source)
		case gpu == p.HostSharesCompute:
			t.Errorf("%s: host_shares_compute %v", name, p.HostSharesCompute)
		}
	}
}
