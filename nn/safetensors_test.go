package nn_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/safetensors"
)

// Golden files written by PyTorch: testdata/safetensors/gen.py.
const stDir = "../testdata/safetensors/"

var stGPTConfig = nn.GPTConfig{Vocab: 50, Seq: 16, Layers: 2, Heads: 2, Embd: 32, Bias: true}

func cpuDev(t *testing.T) device.Device {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// newMLP is Sequential(Linear(8,16), ReLU(), Linear(16,4)), randomly
// initialised from seed.
func newMLP(t *testing.T, dev device.Device, seed uint64) *nn.Sequential {
	rng := rand.New(rand.NewPCG(seed, 1))
	l1, err := nn.NewLinear(dev, 8, 16, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := nn.NewLinear(dev, 16, 4, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	m := nn.NewSequential(l1, nn.ReLU{}, l2)
	t.Cleanup(func() { nn.Release(m) })
	return m
}

func newGPT(t *testing.T, dev device.Device, seed uint64) *nn.GPT {
	m, err := nn.NewGPT(dev, stGPTConfig, rand.New(rand.NewPCG(seed, 2)))
	if err != nil {
		t.Fatal(err)
	}
	m.SetTraining(false)
	t.Cleanup(func() { nn.Release(m) })
	return m
}

func loadIO(t *testing.T, dev device.Device, name string) map[string]*ferry.Tensor {
	ts, _, err := nn.LoadTensors(stDir+name, dev)
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 testdata/safetensors/gen.py)", err)
	}
	t.Cleanup(func() {
		for _, x := range ts {
			x.Release()
		}
	})
	return ts
}

// closeTo compares within tol relative to the largest magnitude of want.
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, worst float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if !(worst <= tol*math.Max(scale, 1e-30)) {
		t.Errorf("%s: max difference %.3g, %.3g relative to max |want| %.3g (tolerance %g)", what, worst, worst/scale, scale, tol)
	}
}

func forward(m nn.Module, x *ferry.Tensor) []float32 {
	y := m.Forward(x)
	defer y.Release()
	return y.Float32s()
}

func snapshot(m nn.Module) map[string][]float32 {
	s := map[string][]float32{}
	for _, p := range m.Parameters() {
		s[p.Name()] = p.Float32s()
	}
	return s
}

func TestLoadMLPFromPyTorch(t *testing.T) {
	dev := cpuDev(t)
	m := newMLP(t, dev, 7)
	if err := nn.LoadSafetensors(stDir+"mlp.safetensors", m); err != nil {
		t.Fatal(err)
	}
	io := loadIO(t, dev, "mlp_io.safetensors")
	closeTo(t, "MLP output", forward(m, io["input"]), io["output"].Float32s(), 1e-5)
}

func TestLoadGPTFromPyTorch(t *testing.T) {
	dev := cpuDev(t)
	m := newGPT(t, dev, 7)
	if err := nn.LoadSafetensors(stDir+"gpt.safetensors", m); err != nil {
		t.Fatal(err)
	}
	io := loadIO(t, dev, "gpt_io.safetensors")
	if io["tokens"].DType() != device.Int32 {
		t.Fatalf("tokens are %s", io["tokens"].DType())
	}
	closeTo(t, "GPT logits", forward(m, io["tokens"]), io["logits"].Float32s(), 1e-5)
}

// TestPyTorchLoadsFerry: ferry's own (randomly initialised) models, saved
// by ferry, loaded by PyTorch (torch_forward.py, which checks the
// checksums too): PyTorch's forward equals ferry's.
func TestPyTorchLoadsFerry(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found: the PyTorch side of the round trip is not checked", python)
	}
	t.Parallel() // most of its time is Python importing torch
	dev := cpuDev(t)
	dir := t.TempDir()
	cases := []struct {
		kind, io, input string
		m               nn.Module
	}{
		{"mlp", "mlp_io.safetensors", "input", newMLP(t, dev, 3)},
		{"gpt", "gpt_io.safetensors", "tokens", newGPT(t, dev, 3)},
	}
	args := []string{stDir + "torch_forward.py"}
	for _, c := range cases {
		path := filepath.Join(dir, c.kind+".safetensors")
		if err := nn.SaveSafetensors(path, c.m); err != nil {
			t.Fatal(err)
		}
		args = append(args, c.kind, path, stDir+c.io)
	}
	cmd := exec.Command(python, args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in testdata
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if strings.Contains(stderr.String(), "No module named 'torch'") {
		t.Skipf("PyTorch is not installed for %s: the PyTorch side of the round trip is not checked", python)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res []struct {
		Shape  []int
		Values []float32
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("%d results, %v", len(res), err)
	}
	for i, c := range cases {
		io := loadIO(t, dev, c.io)
		y := c.m.Forward(io[c.input])
		if !slices.Equal(y.Shape(), res[i].Shape) {
			t.Errorf("%s: ferry's output is %v, PyTorch's %v", c.kind, y.Shape(), res[i].Shape)
		}
		closeTo(t, c.kind+" PyTorch vs ferry", res[i].Values, y.Float32s(), 1e-5)
		y.Release()
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dev := cpuDev(t)
	a, b := newGPT(t, dev, 1), newGPT(t, dev, 2)
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := nn.SaveSafetensors(path, a); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Checksummed || f.Metadata["format"] != "pt" || f.Tensor("lm_head.weight") != nil || len(f.Tensors) != len(nn.GPTParameterNames(stGPTConfig)) {
		t.Errorf("checksummed %v, metadata %v, %d tensors", f.Checksummed, f.Metadata, len(f.Tensors))
	}
	if err := nn.LoadSafetensors(path, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snapshot(a), snapshot(b)) {
		t.Error("parameters differ after a save and a load")
	}
}

// rewrite reads a safetensors file, lets edit change its tensors, and
// writes the result to a new file.
func rewrite(t *testing.T, src string, edit func([]safetensors.Tensor) []safetensors.Tensor) string {
	t.Helper()
	f, err := safetensors.ReadFile(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "edited.safetensors")
	if err := safetensors.WriteFile(out, edit(f.Tensors), f.Metadata); err != nil {
		t.Fatal(err)
	}
	return out
}

// A state dict as torch.save or safetensors' save_model writes it: the
// tied head beside wte, or instead of it.
func TestLoadTiedHead(t *testing.T) {
	dev := cpuDev(t)
	golden := stDir + "gpt.safetensors"
	withHead := rewrite(t, golden, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for _, x := range ts {
			if x.Name == "transformer.wte.weight" {
				x.Name = "lm_head.weight"
				return append(ts, x)
			}
		}
		return ts
	})
	headOnly := rewrite(t, golden, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			if ts[i].Name == "transformer.wte.weight" {
				ts[i].Name = "lm_head.weight"
			}
		}
		return ts
	})
	differs := rewrite(t, golden, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for _, x := range ts {
			if x.Name == "transformer.wte.weight" {
				x.Name, x.Data = "lm_head.weight", slices.Clone(x.Data)
				x.Data[0] ^= 1
				return append(ts, x)
			}
		}
		return ts
	})
	io := loadIO(t, dev, "gpt_io.safetensors")
	for _, path := range []string{withHead, headOnly} {
		m := newGPT(t, dev, 5)
		n, wte := len(m.Parameters()), m.WTE.Weight
		if err := nn.LoadSafetensors(path, m); err != nil {
			t.Fatal(err)
		}
		if m.WTE.Weight != wte || len(m.Parameters()) != n {
			t.Error("the tie changed")
		}
		closeTo(t, "GPT logits", forward(m, io["tokens"]), io["logits"].Float32s(), 1e-5)
	}
	m := newGPT(t, dev, 5)
	before := snapshot(m)
	err := nn.LoadSafetensors(differs, m)
	if err == nil || !strings.Contains(err.Error(), "lm_head.weight differs from transformer.wte.weight") {
		t.Errorf("a head that differs from wte: %v", err)
	}
	if !reflect.DeepEqual(before, snapshot(m)) {
		t.Error("a refused file changed the model")
	}
}

func TestLoadReportsEveryMismatch(t *testing.T) {
	dev := cpuDev(t)
	path := rewrite(t, stDir+"mlp.safetensors", func(ts []safetensors.Tensor) []safetensors.Tensor {
		var out []safetensors.Tensor
		for _, x := range ts {
			switch x.Name {
			case "0.bias": // dropped
			case "2.weight":
				x.Shape = []int{16, 4}
				out = append(out, x)
			case "2.bias":
				v, _ := x.Float32s()
				d := make([]byte, 8*len(v))
				for i := range v {
					bits := math.Float64bits(float64(v[i]))
					for k := 0; k < 8; k++ {
						d[8*i+k] = byte(bits >> (8 * k))
					}
				}
				out = append(out, safetensors.Tensor{Name: x.Name, DType: safetensors.F64, Shape: x.Shape, Data: d})
			default:
				out = append(out, x)
			}
		}
		return append(out, safetensors.FromFloat32s("5.weight", []float32{1}, 1))
	})
	m := newMLP(t, dev, 9)
	before := snapshot(m)
	err := nn.LoadSafetensors(path, m)
	var le *nn.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *LoadError", err)
	}
	if !slices.Equal(le.Missing, []string{"0.bias"}) || !slices.Equal(le.Unexpected, []string{"5.weight"}) || len(le.Mismatched) != 2 {
		t.Errorf("got %+v", le)
	}
	for _, want := range []string{path, "missing 1: 0.bias", "unexpected 1: 5.weight", "2.weight has shape [16 4] in the file, [4 16] in the model", "2.bias is F64 in the file, float32 in the model"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !reflect.DeepEqual(before, snapshot(m)) {
		t.Error("a refused file changed the model")
	}
}

func TestLoadHostileFiles(t *testing.T) {
	dev := cpuDev(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	if err := nn.SaveSafetensors(good, newMLP(t, dev, 4)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	edit := func(name string, f func([]byte) []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, f(slices.Clone(b)), 0o644)
		return p
	}
	cases := map[string]string{
		edit("truncated", func(b []byte) []byte { return b[:len(b)-1] }):                             "run past",
		edit("corrupt-data", func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b }):                "corrupted",
		edit("corrupt-header", func(b []byte) []byte { b[12] = '\\'; return b }):                     "not valid JSON",
		edit("png", func([]byte) []byte { return []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR...") }): "limit",
		edit("random", func([]byte) []byte {
			r := make([]byte, 300)
			for i := range r {
				r[i] = byte(i*7919 + 13)
			}
			return r
		}): "",
		edit("empty", func([]byte) []byte { return nil }): "too short",
		filepath.Join(dir, "missing.safetensors"):         "no such file",
		dir: "directory",
	}
	m := newMLP(t, dev, 9)
	before := snapshot(m)
	for path, want := range cases {
		err := nn.LoadSafetensors(path, m)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one naming the file and saying %q", filepath.Base(path), err, want)
		}
		if _, _, err := nn.LoadTensors(path, dev); err == nil {
			t.Errorf("%s: LoadTensors accepted it", filepath.Base(path))
		}
	}
	if !reflect.DeepEqual(before, snapshot(m)) {
		t.Error("a refused file changed the model")
	}
}

func TestSaveLoadTensors(t *testing.T) {
	dev := cpuDev(t)
	path := filepath.Join(t.TempDir(), "moments.safetensors")
	f := ferry.FromFloat32s(dev, []float32{1, -2, 3.5, 0, 1e-30, 7}, 2, 3)
	i := ferry.FromInt32s(dev, []int32{3, -4}, 2)
	defer f.Release()
	defer i.Release()
	md := map[string]string{"step": "42"}
	if err := nn.SaveTensors(path, map[string]*ferry.Tensor{"exp_avg.0.weight": f, "steps": i}, md); err != nil {
		t.Fatal(err)
	}
	got, gotMD, err := nn.LoadTensors(path, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range got {
			x.Release()
		}
	}()
	if !reflect.DeepEqual(gotMD, md) || len(got) != 2 {
		t.Fatalf("metadata %v, %d tensors", gotMD, len(got))
	}
	if g := got["exp_avg.0.weight"]; !slices.Equal(g.Shape(), []int{2, 3}) || !slices.Equal(g.Float32s(), f.Float32s()) {
		t.Errorf("float tensor: %v", g)
	}
	if g := got["steps"]; g.DType() != device.Int32 || !slices.Equal(g.Int32s(), []int32{3, -4}) {
		t.Errorf("int tensor: %v", g)
	}
	// Other dtypes: every one named, nothing allocated.
	wide := filepath.Join(t.TempDir(), "wide.safetensors")
	safetensors.WriteFile(wide, []safetensors.Tensor{
		{Name: "a", DType: safetensors.F64, Shape: []int{1}, Data: make([]byte, 8)},
		{Name: "b", DType: safetensors.BF16, Shape: []int{1}, Data: make([]byte, 2)},
		safetensors.FromFloat32s("c", []float32{1}, 1),
	}, nil)
	if _, _, err := nn.LoadTensors(wide, dev); err == nil || !strings.Contains(err.Error(), "a is F64") || strings.Contains(err.Error(), "b is") {
		t.Errorf("wide dtypes: %v", err)
	}
	// BF16 loads as bfloat16 and F16 widened to float32, exactly; both
	// save back (BF16 as BF16).
	half := filepath.Join(t.TempDir(), "half.safetensors")
	safetensors.WriteFile(half, []safetensors.Tensor{
		{Name: "b", DType: safetensors.BF16, Shape: []int{3}, Data: []byte{0x80, 0x3f, 0xc0, 0xbf, 0xc0, 0x7f}}, // 1, -1.5, NaN
		{Name: "h", DType: safetensors.F16, Shape: []int{2}, Data: []byte{0x00, 0x3c, 0x00, 0xc2}},              // 1, -3
	}, nil)
	hs, _, err := nn.LoadTensors(half, dev)
	if err != nil {
		t.Fatal(err)
	}
	if b := hs["b"]; b.DType() != device.BFloat16 {
		t.Errorf("BF16 loaded as %s", b.DType())
	} else if v := ferry.Cast(b, device.Float32).Float32s(); v[0] != 1 || v[1] != -1.5 || v[2] == v[2] {
		t.Errorf("BF16 values %v, want [1 -1.5 NaN]", v)
	}
	if h := hs["h"]; h.DType() != device.Float32 || !slices.Equal(h.Float32s(), []float32{1, -3}) {
		t.Errorf("F16: %s %v, want float32 [1 -3]", h.DType(), h.Float32s())
	}
	back := filepath.Join(t.TempDir(), "back.safetensors")
	if err := nn.SaveTensors(back, hs, nil); err != nil {
		t.Fatal(err)
	}
	sf, err := safetensors.ReadFile(back, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sf.Tensors {
		if st.Name == "b" && (st.DType != safetensors.BF16 || string(st.Data) != "\x80\x3f\xc0\xbf\xc0\x7f") {
			t.Errorf("bfloat16 saved as %s %x", st.DType, st.Data)
		}
	}
	for _, h := range hs {
		h.Release()
	}
	if err := nn.SaveTensors(path, map[string]*ferry.Tensor{"x": nil}, nil); err == nil {
		t.Error("a nil tensor was saved")
	}
}

func TestSaveErrors(t *testing.T) {
	md := meta.New(device.Options{}, nil)
	defer md.Close()
	m := newGPT(t, md, 1)
	dir := t.TempDir()
	if err := nn.SaveSafetensors(filepath.Join(dir, "meta.safetensors"), m); err == nil || !strings.Contains(err.Error(), "meta.safetensors") {
		t.Errorf("saving a model on meta: %v", err)
	}
	if err := nn.SaveSafetensors(dir, newMLP(t, cpuDev(t), 1)); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("saving over a directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	// A read-only directory (root ignores the permission bits; sysfs
	// refuses even root).
	ro := t.TempDir()
	os.Chmod(ro, 0o555)
	defer os.Chmod(ro, 0o755)
	if os.Geteuid() == 0 {
		ro = "/sys"
	}
	if st, err := os.Stat(ro); err != nil || !st.IsDir() {
		t.Skip("no read-only directory to write into")
	}
	p := filepath.Join(ro, "w.safetensors")
	if err := nn.SaveSafetensors(p, newMLP(t, cpuDev(t), 1)); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("saving into a read-only directory: %v", err)
	}
	ents, _ := os.ReadDir(ro)
	for _, e := range ents {
		if strings.Contains(e.Name(), "w.safetensors") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A bfloat16 copy of the PyTorch MLP loads with ConvertFloats (and only
// with it), and computes what the float32 weights compute, to bfloat16's
// precision.
func TestLoadConvertFloats(t *testing.T) {
	dev := cpuDev(t)
	path := rewrite(t, stDir+"mlp.safetensors", func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i, x := range ts {
			v, _ := x.Float32s()
			d := make([]byte, 2*len(v))
			for k, f := range v {
				b := math.Float32bits(f) + 0x8000 // round half up to bfloat16
				d[2*k], d[2*k+1] = byte(b>>16), byte(b>>24)
			}
			ts[i] = safetensors.Tensor{Name: x.Name, DType: safetensors.BF16, Shape: x.Shape, Data: d}
		}
		return ts
	})
	m := newMLP(t, dev, 2)
	var le *nn.LoadError
	if err := nn.LoadSafetensors(path, m); !errors.As(err, &le) || len(le.Mismatched) != 4 {
		t.Fatalf("BF16 loaded without ConvertFloats: %v", err)
	}
	if err := nn.LoadSafetensorsWith(path, m, nn.LoadOptions{ConvertFloats: true}); err != nil {
		t.Fatal(err)
	}
	io := loadIO(t, dev, "mlp_io.safetensors")
	closeTo(t, "MLP output from bfloat16 weights", forward(m, io["input"]), io["output"].Float32s(), 2e-2)
}
