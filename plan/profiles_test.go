package plan

import (
	"strings"
	"testing"
)

// Every built-in profile is valid; the GPUs' bfloat16 products run on
// their tensor cores, well past the FP32 rate, and the CPUs', unmeasured,
// fall back to it.
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
		case !gpu && p.MatmulBF16FLOPS != 0:
			t.Errorf("%s: matmul_bf16_flops %g on a CPU without a measured figure", name, p.MatmulBF16FLOPS)
		}
	}
}
