package devicetest

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// The bfloat16 tests pass on a device that converts and multiplies as
// package device says (a CPU device with bfloat16 kernels written here,
// element by element) and fail on one that gets any of it wrong: they
// test the tests before the devices have the kernels.

// bf16Device is the CPU device with bfloat16 Convert and Gemm; bug, if
// set, breaks them in one way.
type bf16Device struct {
	device.Device
	bug string
}

func (d *bf16Device) Kernels() device.Kernels {
	return &bf16Kernels{Kernels: d.Device.Kernels(), bug: d.bug}
}

type bf16Kernels struct {
	device.Kernels
	bug string
}

func elem(v device.View, i int) []byte {
	sz := v.DType.Size()
	return cpu.Bytes(v.Block)[(v.Off+i)*sz : (v.Off+i+1)*sz]
}

func getBits(dt device.DType, b *device.Block, i int) uint32 {
	e := elem(device.View{Block: b, DType: dt}, i)
	if dt.Size() == 2 {
		return uint32(binary.NativeEndian.Uint16(e))
	}
	return binary.NativeEndian.Uint32(e)
}

func setBits(dt device.DType, b *device.Block, i int, x uint32) {
	e := elem(device.View{Block: b, DType: dt}, i)
	if dt.Size() == 2 {
		binary.NativeEndian.PutUint16(e, uint16(x))
	} else {
		binary.NativeEndian.PutUint32(e, x)
	}
}

func (k *bf16Kernels) Convert(dst, src device.View) error {
	if err := device.CheckConvertTypes("test", dst.DType, src.DType); err != nil && k.bug != "accepts all" {
		return err
	}
	forEach(dst.Shape, func(idx []int) {
		x := getBits(src.DType, src.Block, offset(src.Off, idx, src.Strides))
		y := convertBits(dst.DType, src.DType, x)
		switch {
		case k.bug == "truncates" && dst.DType == device.BFloat16 && src.DType == device.Float32:
			y = x >> 16
		case k.bug == "rounds NaN" && dst.DType == device.BFloat16 && src.DType == device.Float32:
			y = (x + 0x7fff + (x>>16)&1) >> 16
		case k.bug == "ties away" && dst.DType == device.BFloat16 && src.DType == device.Float32 && x&0x7fffffff <= 0x7f800000:
			y = (x + 0x8000) >> 16
		case k.bug == "quiets NaN" && dst.DType == src.DType && dst.DType == device.Float32 && x&0x7fffffff > 0x7f800000:
			y = x | 0x00400000
		}
		at := offset(dst.Off, idx, dst.Strides)
		if k.bug == "ignores dst strides" {
			at = dst.Off + offset(0, idx, device.Contiguous(dst.Shape))
		}
		setBits(dst.DType, dst.Block, at, y)
	})
	return nil
}

func (k *bf16Kernels) Gemm(p device.GemmParams) error {
	if !p.Mixed() {
		return k.Kernels.Gemm(p)
	}
	if err := device.CheckGemmTypes("test", p); err != nil {
		return err
	}
	get := func(dt device.DType, b *device.Block, i int) float32 {
		if dt == device.BFloat16 {
			return device.FromBFloat16(uint16(getBits(dt, b, i)))
		}
		return math.Float32frombits(getBits(dt, b, i))
	}
	for i := 0; i < p.Batch; i++ {
		for m := 0; m < p.M; m++ {
			for n := 0; n < p.N; n++ {
				var s float32
				for kk := 0; kk < p.K; kk++ {
					ai, bi := p.OffA+i*p.StrideA+m*p.LDA+kk, p.OffB+i*p.StrideB+kk*p.LDB+n
					if p.TransA {
						ai = p.OffA + i*p.StrideA + kk*p.LDA + m
					}
					if p.TransB {
						bi = p.OffB + i*p.StrideB + n*p.LDB + kk
					}
					prod := get(p.TypeA, p.A, ai) * get(p.TypeB, p.B, bi)
					if k.bug == "bf16 sums" {
						s = device.FromBFloat16(device.ToBFloat16(s + prod))
					} else {
						s += prod
					}
				}
				ci := p.OffC + i*p.StrideC + m*p.LDC + n
				v := p.Alpha * s
				if p.Beta != 0 && k.bug != "ignores beta" {
					v += p.Beta * get(p.TypeC, p.C, ci)
				}
				if p.TypeC == device.Float32 {
					setBits(p.TypeC, p.C, ci, math.Float32bits(v))
				} else if k.bug == "truncates C" {
					setBits(p.TypeC, p.C, ci, math.Float32bits(v)>>16)
				} else {
					setBits(p.TypeC, p.C, ci, uint32(device.ToBFloat16(v)))
				}
			}
		}
	}
	return nil
}

func runBF16(t *testing.T, bug string) {
	RunKernels(t, func(t *testing.T, opts device.Options) device.Device {
		d, err := device.Open("cpu", opts)
		if err != nil {
			t.Fatal(err)
		}
		return &bf16Device{Device: d, bug: bug}
	}, Caps{HasData: true}, "ConvertBF16", "GemmBF16")
}

func TestBF16Reference(t *testing.T) { runBF16(t, "") }

// TestBF16Bug runs the tests on the device with the bug
// TestBF16CatchesBugs names, in a child process.
func TestBF16Bug(t *testing.T) {
	bug := os.Getenv("FERRY_DEVICETEST_BF16_BUG")
	if bug == "" {
		t.Skip("run by TestBF16CatchesBugs")
	}
	runBF16(t, bug)
}

// Each bug makes a bfloat16 test fail.
func TestBF16CatchesBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs the test binary once per bug")
	}
	for _, bug := range []string{"truncates", "rounds NaN", "ties away", "quiets NaN", "ignores dst strides", "accepts all",
		"bf16 sums", "ignores beta", "truncates C"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBF16Bug$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FERRY_DEVICETEST_BF16_BUG="+bug)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("bug %q went unnoticed:\n%s", bug, out)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "bf16.go:") {
				t.Logf("bug %q: %s", bug, strings.TrimSpace(line))
				break
			}
		}
	}
}
