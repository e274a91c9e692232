package ferry_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
)

// Every op a bfloat16 model reaches, on bfloat16 inputs, against a
// float64 reference on the same (bfloat16) values, with the result type
// the rules give (ops_precision.go): on the CPU device (one pass), on the
// CPU device with every op widening (the path a device without
// ElementwiseBF16 takes), and on the CUDA device over the fake driver.
// A bfloat16 result must be the reference rounded, within one bfloat16
// step (float32 sums in another order may land on a neighbour); a float32
// result within float32 rounding of the reference.
func TestOpsInBF16(t *testing.T) {
	devices := []struct {
		name  string
		open  func(t *testing.T) device.Device
		widen bool
	}{
		{"cpu", func(t *testing.T) device.Device { return newCPU(t, device.Options{PoisonFreed: true}) }, false},
		{"cpu-widened", func(t *testing.T) device.Device { return newCPU(t, device.Options{PoisonFreed: true}) }, true},
		{"cuda-fake", func(t *testing.T) device.Device {
			d, err := cuda.Open(fake.New(fake.Options{SMs: 4}), 0, device.Options{PoisonFreed: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		}, false},
	}
	for _, d := range devices {
		t.Run(d.name, func(t *testing.T) {
			defer ferry.SetWidenAlways(d.widen)()
			opsInBF16(t, d.open(t))
		})
	}
}

// bf16Case is one op: run computes it on bfloat16 tensors made from the
// inputs; ref computes it in float64 on the same values.
type bf16Case struct {
	name   string
	shapes [][]int
	out    device.DType
	run    func(xs []*ferry.Tensor) *ferry.Tensor
	ref    func(xs [][]float64) []float64
}

func opsInBF16(t *testing.T, dev device.Device) {
	const R, C = 6, 37
	rowwise := func(x []float64, f func(row []float64) []float64) []float64 {
		var out []float64
		for r := 0; r*C < len(x); r++ {
			out = append(out, f(x[r*C:(r+1)*C])...)
		}
		return out
	}
	each := func(x []float64, f func(float64) float64) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = f(v)
		}
		return out
	}
	geluTanh := func(v float64) float64 {
		return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	}
	cases := []bf16Case{
		{"gelu_tanh", [][]int{{R, C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.GELUTanh(x[0]) },
			func(x [][]float64) []float64 { return each(x[0], geluTanh) }},
		{"relu", [][]int{{R, C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.ReLU(x[0]) },
			func(x [][]float64) []float64 { return each(x[0], func(v float64) float64 { return math.Max(v, 0) }) }},
		{"silu", [][]int{{R, C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.SiLU(x[0]) },
			func(x [][]float64) []float64 {
				return each(x[0], func(v float64) float64 { return v / (1 + math.Exp(-v)) })
			}},
		{"scale", [][]int{{R, C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Scale(x[0], 0.3) },
			func(x [][]float64) []float64 {
				return each(x[0], func(v float64) float64 { return v * float64(float32(0.3)) })
			}},
		{"add", [][]int{{R, C}, {R, C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Add(x[0], x[1]) },
			func(x [][]float64) []float64 {
				o := make([]float64, len(x[0]))
				for i := range o {
					o[i] = x[0][i] + x[1][i]
				}
				return o
			}},
		{"add_float32_residual", [][]int{{R, C}, {R, C}}, device.Float32, func(x []*ferry.Tensor) *ferry.Tensor {
			r := ferry.Cast(x[0], device.Float32) // a float32 stream plus a bfloat16 branch
			defer r.Release()
			return ferry.Add(r, x[1])
		}, func(x [][]float64) []float64 {
			o := make([]float64, len(x[0]))
			for i := range o {
				o[i] = x[0][i] + x[1][i]
			}
			return o
		}},
		{"mul_broadcast", [][]int{{R, C}, {C}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Mul(x[0], x[1]) },
			func(x [][]float64) []float64 {
				o := make([]float64, len(x[0]))
				for i := range o {
					o[i] = x[0][i] * x[1][i%C]
				}
				return o
			}},
		{"softmax", [][]int{{R, C}}, device.Float32, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Softmax(x[0]) },
			func(x [][]float64) []float64 {
				return rowwise(x[0], func(row []float64) []float64 {
					m := math.Inf(-1)
					for _, v := range row {
						m = math.Max(m, v)
					}
					var s float64
					o := make([]float64, len(row))
					for i, v := range row {
						o[i] = math.Exp(v - m)
						s += o[i]
					}
					for i := range o {
						o[i] /= s
					}
					return o
				})
			}},
		{"layer_norm", [][]int{{R, C}}, device.Float32, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.LayerNorm(x[0], nil, nil, 1e-5) },
			func(x [][]float64) []float64 {
				return rowwise(x[0], func(row []float64) []float64 {
					var m, v float64
					for _, a := range row {
						m += a
					}
					m /= float64(len(row))
					for _, a := range row {
						v += (a - m) * (a - m)
					}
					v /= float64(len(row))
					o := make([]float64, len(row))
					for i, a := range row {
						o[i] = (a - m) / math.Sqrt(v+float64(float32(1e-5)))
					}
					return o
				})
			}},
		{"sum", [][]int{{R, C}}, device.Float32, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Sum(x[0], 0) },
			func(x [][]float64) []float64 {
				o := make([]float64, C)
				for i, v := range x[0] {
					o[i%C] += v
				}
				return o
			}},
		{"cross_entropy", [][]int{{R, C}}, device.Float32, func(x []*ferry.Tensor) *ferry.Tensor {
			tg := make([]int32, R)
			for i := range tg {
				tg[i] = int32(i * 5 % C)
			}
			target := ferry.FromInt32s(x[0].Device(), tg, R)
			defer target.Release()
			return ferry.CrossEntropy(x[0], target)
		}, func(x [][]float64) []float64 {
			var l float64
			for r := 0; r < R; r++ {
				row := x[0][r*C : (r+1)*C]
				m := math.Inf(-1)
				for _, v := range row {
					m = math.Max(m, v)
				}
				var s float64
				for _, v := range row {
					s += math.Exp(v - m)
				}
				l += m + math.Log(s) - row[r*5%C]
			}
			return []float64{l / R}
		}},
		{"matmul", [][]int{{R, C}, {C, 5}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) },
			func(x [][]float64) []float64 {
				o := make([]float64, R*5)
				for i := 0; i < R; i++ {
					for j := 0; j < 5; j++ {
						for k := 0; k < C; k++ {
							o[i*5+j] += x[0][i*C+k] * x[1][k*5+j]
						}
					}
				}
				return o
			}},
		{"attention", [][]int{{1, 2, 9, 8}, {1, 2, 9, 8}, {1, 2, 9, 8}}, device.BFloat16, func(x []*ferry.Tensor) *ferry.Tensor {
			return ferry.ScaledDotProductAttention(x[0], x[1], x[2], ferry.AttentionOptions{Causal: true})
		}, func(x [][]float64) []float64 {
			const H, T, D = 2, 9, 8
			o := make([]float64, H*T*D)
			scale := float64(float32(1 / math.Sqrt(D)))
			for h := 0; h < H; h++ {
				for i := 0; i < T; i++ {
					w := make([]float64, i+1)
					m := math.Inf(-1)
					for j := 0; j <= i; j++ {
						for d := 0; d < D; d++ {
							w[j] += x[0][(h*T+i)*D+d] * x[1][(h*T+j)*D+d]
						}
						w[j] *= scale
						m = math.Max(m, w[j])
					}
					var s float64
					for j := range w {
						w[j] = math.Exp(w[j] - m)
						s += w[j]
					}
					for j := range w {
						for d := 0; d < D; d++ {
							o[(h*T+i)*D+d] += w[j] / s * x[2][(h*T+j)*D+d]
						}
					}
				}
			}
			return o
		}},
	}
	rng := rand.New(rand.NewPCG(7, 18))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ins []*ferry.Tensor
			var vals [][]float64
			for _, s := range c.shapes {
				n := device.Numel(s)
				f := make([]float32, n)
				v := make([]float64, n)
				for i := range f {
					f[i] = bf16Of(float32(rng.NormFloat64() * 1.5))
					v[i] = float64(f[i])
				}
				x := ferry.FromFloat32s(dev, f, s...)
				ins = append(ins, ferry.Cast(x, device.BFloat16))
				x.Release()
				vals = append(vals, v)
			}
			defer func() {
				for _, x := range ins {
					x.Release()
				}
			}()
			y := c.run(ins)
			defer y.Release()
			if y.DType() != c.out {
				t.Fatalf("result is %s, want %s", y.DType(), c.out)
			}
			w := ferry.Cast(y, device.Float32)
			got := w.Float32s()
			w.Release()
			want := c.ref(vals)
			if len(got) != len(want) {
				t.Fatalf("%d values, want %d", len(got), len(want))
			}
			var scale float64
			for _, v := range want {
				scale = math.Max(scale, math.Abs(v))
			}
			for i := range want {
				d := math.Abs(float64(got[i]) - want[i])
				tol := 1e-5*scale + 1e-6
				if c.out == device.BFloat16 {
					tol = math.Abs(want[i])/128 + 1e-5*scale // one bfloat16 step, and float32 sums
				}
				if !(d <= tol) {
					t.Fatalf("element %d: %v, want %v (difference %.3g, tolerance %.3g)", i, got[i], want[i], d, tol)
				}
			}
		})
	}
}
