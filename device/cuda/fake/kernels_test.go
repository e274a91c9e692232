package fake

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/kernels"
)

// Every kernel of the sources has a launch here, and nothing else does.
func TestEveryKernelRuns(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range kernels.Entries() {
		seen[e.Name] = true
		if kernelsByName[e.Name] == nil {
			t.Errorf("%s (%s) has no launch in the fake driver", e.Name, e.File)
		}
	}
	for name := range kernelsByName {
		if !seen[name] {
			t.Errorf("the fake driver runs %s, which no .cu file defines", name)
		}
	}
}

// A dropout launch carries a threshold and a scale; the probability
// recovered from them gives both back, for every p the CUDA device might
// have been given.
func TestDropProbability(t *testing.T) {
	for _, p := range []float32{0, 1e-12, 3e-10, 1e-6, 0.001, 0.1, 0.25, 1.0 / 3, 0.5, 0.9, 0.999999, 1} {
		thr, scale := device.DropoutThreshold(p), 1/(1-p)
		q, ok := dropProbability(thr, scale)
		if !ok || device.DropoutThreshold(q) != thr || 1/(1-q) != scale {
			t.Errorf("p = %v (threshold %#x, scale %v): recovered %v, %v", p, thr, scale, q, ok)
		}
	}
	if _, ok := dropProbability(device.DropoutThreshold(0.5), 3); ok {
		t.Errorf("a threshold of 0.5 with a scale of 3 gave a probability")
	}
}

// A launch whose operands reach past their allocation faults, as a GPU's
// out-of-bounds access does, before any element is written.
func TestLaunchChecksOperands(t *testing.T) {
	mem := map[uint64][]byte{0x1000: make([]byte, 64), 0x2000: make([]byte, 64)}
	resolve := func(p uint64) ([]byte, bool) {
		for base, b := range mem {
			if p >= base && p < base+uint64(len(b)) {
				return b[p-base:], true
			}
		}
		return nil, false
	}
	args := func(n int64, src uint64) [][]byte {
		le := binary.LittleEndian
		a := [][]byte{make([]byte, 4), make([]byte, 4), make([]byte, 8), make([]byte, 8), make([]byte, 8)}
		le.PutUint32(a[0], uint32(device.Neg))
		le.PutUint32(a[1], math.Float32bits(1))
		le.PutUint64(a[2], 0x1000)
		le.PutUint64(a[3], src)
		le.PutUint64(a[4], uint64(n))
		return a
	}
	grid, block := cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 256, Y: 1, Z: 1}
	binary.LittleEndian.PutUint32(mem[0x2000], math.Float32bits(2))
	if err := RunKernel("ferry_unary_contig", grid, block, args(16, 0x2000), resolve); err != nil {
		t.Fatalf("16 elements of 64 bytes: %v", err)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(mem[0x1000])); got != -2 {
		t.Errorf("neg(2) = %v", got)
	}
	for _, c := range []struct {
		n    int64
		src  uint64
		want string
	}{
		{17, 0x2000, "reach past the 64 bytes"},
		{4, 0x2038, "reach past the 8 bytes"},
		{4, 0x3000, "is not device memory"},
		{4, 0x2002, "not aligned"},
	} {
		err := RunKernel("ferry_unary_contig", grid, block, args(c.n, c.src), resolve)
		if !cu.IsResult(err, cu.ErrIllegalAddress) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d elements from %#x: %v, want CUDA_ERROR_ILLEGAL_ADDRESS saying %q", c.n, c.src, err, c.want)
		}
	}
	err := RunKernel("ferry_softmax", grid, cu.Dim3{X: 128, Y: 1, Z: 1}, make([][]byte, 5), resolve)
	if !cu.IsResult(err, cu.ErrIllegalAddress) || !strings.Contains(err.Error(), "written for 256x1 threads") {
		t.Errorf("softmax on 128 threads: %v", err)
	}
}
