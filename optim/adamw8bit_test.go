package optim_test

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/optim"
)

// golden8bit is optim/testdata/adamw8bit/golden.json.gz (gen.py beside it
// says what it holds).
type golden8bit struct {
	Sizes                 []int
	LR, Beta1, Beta2, Eps float32
	WeightDecay           float32 `json:"weight_decay"`
	MinQuantized          int     `json:"min_8bit_size"`
	Block                 int
	Steps                 [][]map[string]string
}

// value is gen.py's value(): a float32 drawn from (seed, i) by splitmix64.
func value(seed, i uint64) float32 {
	z := seed*0x9E3779B97F4A7C15 + i + 1
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	frac := float64(z>>40)/float64(1<<24)*2 - 1
	return float32(math.Ldexp(frac, -int((z>>8)%14)))
}

func draw(seed uint64, n int, zeros bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = value(seed, uint64(i))
		if zeros && (i%97 == 0 || i >= 256 && i < 512) {
			v[i] = 0
		}
	}
	return v
}

func readGolden8bit(t *testing.T) *golden8bit {
	f, err := os.Open("testdata/adamw8bit/golden.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g golden8bit
	if err := json.NewDecoder(z).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func unb64(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func floatsOf(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// run8bit trains the golden's parameters for its ten steps on dev with
// the update path path (and the state on the host with onHost), calling
// check after each step with the parameters and the optimizer's state.
func run8bit(t *testing.T, g *golden8bit, path string, onHost bool,
	check func(step int, params []*ferry.Tensor, st optim.State)) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var params []*ferry.Tensor
	for k, n := range g.Sizes {
		params = append(params, ferry.FromFloat32s(dev, draw(uint64(1000+k), n, false), n).SetName(string(rune('a'+k))))
	}
	var opts []optim.Option
	if onHost {
		opts = append(opts, optim.OnHost())
	}
	o := optim.NewAdamW8bit(params, g.LR, opts...)
	o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.MinQuantized = g.Beta1, g.Beta2, g.Eps, g.WeightDecay, g.MinQuantized
	optim.SetUpdatePath(&o.Engine, path)
	defer o.Release()
	for step := 1; step <= len(g.Steps); step++ {
		for k, p := range params {
			p.SetGrad(ferry.FromFloat32s(dev, draw(uint64(100*step+k), p.Numel(), true), p.Numel()))
		}
		if err := o.Step(); err != nil {
			t.Fatal(err)
		}
		check(step, params, o.State())
	}
	for _, p := range params {
		p.SetGrad(nil)
		p.Release()
	}
}

// TestAdamW8bitMatchesReference: ten steps on odd-sized parameters against
// a PyTorch reference written from the published algorithm (gen.py): codes
// equal or one apart where float rounding differs, parameters within 1e-6
// relative. Every update path gives the same bits.
func TestAdamW8bitMatchesReference(t *testing.T) {
	g := readGolden8bit(t)
	if g.Block != optim.Block8bit {
		t.Fatalf("golden block %d, optim.Block8bit %d", g.Block, optim.Block8bit)
	}
	type snapshot struct {
		params [][]float32
		state  map[string][]byte
	}
	var loop []snapshot
	codes, off1, offMore, values, exact := 0, 0, 0, 0, 0
	run8bit(t, g, "", false, func(step int, params []*ferry.Tensor, st optim.State) {
		snap := snapshot{state: map[string][]byte{}}
		for k, p := range params {
			got := p.Float32s()
			snap.params = append(snap.params, got)
			want := floatsOf(unb64(t, g.Steps[step-1][k]["param"]))
			for i := range want {
				values++
				if got[i] == want[i] {
					exact++
				}
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Max(math.Abs(float64(want[i])), 1e-6) {
					t.Fatalf("step %d, parameter %d[%d]: %v, reference %v", step, k, i, got[i], want[i])
				}
			}
			for slot, enc := range g.Steps[step-1][k] {
				if slot == "param" {
					continue
				}
				tt := st.Tensors[p.Name()+"."+slot]
				if tt == nil {
					t.Fatalf("step %d: no state %s.%s", step, p.Name(), slot)
				}
				raw := tt.RawBytes()
				snap.state[p.Name()+"."+slot] = raw
				want := unb64(t, enc)
				if tt.DType() == device.Uint8 {
					for i := range want {
						codes++
						switch d := int(raw[i]) - int(want[i]); {
						case d == 1 || d == -1:
							off1++
						case d != 0:
							offMore++
							t.Errorf("step %d, %s.%s[%d]: code %d, reference %d", step, p.Name(), slot, i, raw[i], want[i])
						}
					}
					continue
				}
				gf, wf := floatsOf(raw), floatsOf(want)
				for i := range wf {
					if d := math.Abs(float64(gf[i] - wf[i])); d > 1e-6*math.Abs(float64(wf[i])) {
						t.Fatalf("step %d, %s.%s[%d]: %v, reference %v", step, p.Name(), slot, i, gf[i], wf[i])
					}
				}
			}
		}
		loop = append(loop, snap)
	})
	t.Logf("%d codes compared over 10 steps: %d one apart, %d further; %d of %d parameter values bit-identical", codes, off1, offMore, exact, values)
	if off1 > codes/1000 {
		t.Errorf("%d of %d codes one apart: more than float rounding explains", off1, codes)
	}
	// The other paths: the same bits as the in-place loop.
	for _, c := range []struct {
		path   string
		onHost bool
	}{{"copy", false}, {"", true}} {
		run8bit(t, g, c.path, c.onHost, func(step int, params []*ferry.Tensor, st optim.State) {
			for k, p := range params {
				if !slices.Equal(f32bits(p.Float32s()), f32bits(loop[step-1].params[k])) {
					t.Fatalf("path %q host %v, step %d: parameter %d differs from the in-place loop's", c.path, c.onHost, step, k)
				}
			}
			for k, want := range loop[step-1].state {
				if !slices.Equal(st.Tensors[k].RawBytes(), want) {
					t.Fatalf("path %q host %v, step %d: state %s differs from the in-place loop's", c.path, c.onHost, step, k)
				}
			}
		})
	}
}

func f32bits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return out
}

// The start-table quantisation gives the branch-free binary search's code
// (torchao's) for every map value and its neighbours, every midpoint
// between codes, the edges (±0, ±Inf, NaN, subnormals, beyond ±1), and a
// million random floats of every magnitude.
func TestQuantizeMatchesBinarySearch(t *testing.T) {
	var xs []float32
	for _, signed := range []bool{true, false} {
		for c := range 256 {
			v := optim.QuantMapValue(uint8(c), signed)
			xs = append(xs, v, math.Nextafter32(v, -2), math.Nextafter32(v, 2))
			if c < 255 {
				mid := (v + optim.QuantMapValue(uint8(c+1), signed)) / 2
				xs = append(xs, mid, math.Nextafter32(mid, -2), math.Nextafter32(mid, 2))
			}
		}
	}
	inf := float32(math.Inf(1))
	xs = append(xs, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()), 1e-45, -1e-45, 1.5, -1.5, 1e-38, -1e-38)
	z := uint64(12345)
	for range 1 << 20 {
		z = z*6364136223846793005 + 1442695040888963407
		x := math.Float32frombits(uint32(z >> 32))
		if x == x {
			xs = append(xs, x, math.Float32frombits(uint32(z>>32)&^(0xff<<23)|uint32(127-z%40)<<23))
		}
	}
	for _, signed := range []bool{true, false} {
		for _, x := range xs {
			if got, want := optim.Quantize(x, signed), optim.QuantizeSearch(x, signed); got != want {
				t.Fatalf("signed %v, x %v (%#x): code %d, the binary search %d", signed, x, math.Float32bits(x), got, want)
			}
		}
	}
}
