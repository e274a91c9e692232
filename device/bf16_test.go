package device_test

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"ferry/device"
)

// float32 → bfloat16 gives PyTorch's bits for every pattern in
// testdata/bf16_golden.json (ties, signed zeros, subnormals, the largest
// finite values, infinities, NaNs with payloads, random patterns), and
// bfloat16 → float32 → bfloat16 is the identity on every non-NaN pattern.
func TestBFloat16MatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/bf16_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Torch string      `json:"torch"`
		Pairs [][2]uint32 `json:"pairs"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Pairs) < 2000 {
		t.Fatalf("%d pairs in the golden file", len(g.Pairs))
	}
	bad := 0
	for _, p := range g.Pairs {
		f := math.Float32frombits(p[0])
		got, want := device.ToBFloat16(f), uint16(p[1])
		if math.IsNaN(float64(f)) {
			// NaN stays NaN. The bits are each library's own: PyTorch's
			// vector conversion gives 0xffff for every NaN, its scalar one
			// 0x7fc0; ours keeps the sign and the payload's top bits.
			if !math.IsNaN(float64(device.FromBFloat16(got))) || !math.IsNaN(float64(device.FromBFloat16(want))) {
				t.Errorf("NaN %#08x: %#04x, PyTorch %#04x", p[0], got, want)
				bad++
			}
			continue
		}
		if got != want {
			if bad++; bad <= 10 {
				t.Errorf("%#08x (%g): %#04x, PyTorch %#04x", p[0], f, got, want)
			}
		}
	}
	t.Logf("%d patterns against PyTorch %s", len(g.Pairs), g.Torch)
	for u := 0; u < 1<<16; u++ {
		f := device.FromBFloat16(uint16(u))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := device.ToBFloat16(f); back != uint16(u) {
			t.Fatalf("%#04x → %g → %#04x", u, f, back)
		}
	}
	src := []float32{1, -2.5, 3.14159, float32(math.Inf(-1))}
	h := make([]uint16, len(src))
	device.ToBFloat16s(h, src)
	w := make([]float32, len(src))
	device.FromBFloat16s(w, h)
	if w[0] != 1 || w[1] != -2.5 || w[2] != 3.140625 || !math.IsInf(float64(w[3]), -1) {
		t.Errorf("slices: %v", w)
	}
}
