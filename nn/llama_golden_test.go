package nn_test

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/optim"
)

// The Llama against PyTorch: testdata/llama/gen.py writes a reference
// written by hand in PyTorch 1.13 with Hugging Face's LlamaForCausalLM
// structure (grouped-query attention, rotate_half rotary embeddings,
// SwiGLU, RMSNorm, untied head), its weights under Hugging Face's names,
// the first step's logits and gradients, and five AdamW steps.

const llamaDir = "../testdata/llama/"

func llamaGoldenConfig(t *testing.T, meta map[string]string) nn.LlamaConfig {
	atoi := func(k string) int {
		v, err := strconv.Atoi(meta[k])
		if err != nil {
			t.Fatalf("metadata %s: %v", k, err)
		}
		return v
	}
	theta, err1 := strconv.ParseFloat(meta["rope_theta"], 64)
	eps, err2 := strconv.ParseFloat(meta["norm_eps"], 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("metadata: %v %v", err1, err2)
	}
	return nn.LlamaConfig{Vocab: atoi("vocab"), Seq: atoi("seq"), Layers: atoi("layers"), Heads: atoi("heads"),
		KVHeads: atoi("kv_heads"), Embd: atoi("embd"), Hidden: atoi("hidden"), RopeTheta: theta, NormEps: float32(eps)}
}

// maxErr is the largest |got - want| and the largest |want|.
func maxErr(got, want []float32) (float64, float64) {
	var e, s float64
	for i := range want {
		e = math.Max(e, math.Abs(float64(got[i])-float64(want[i])))
		s = math.Max(s, math.Abs(float64(want[i])))
	}
	return e, s
}

// TestGoldenLlama runs with matrix products in OpenBLAS (skipped where
// it cannot be loaded) and in the pure-Go GEMM, on a CPU that poisons
// freed memory.
func TestGoldenLlama(t *testing.T) {
	for _, b := range []string{"blas", "go"} {
		t.Run(b, func(t *testing.T) {
			if err := cpu.SetMatmulBackend(b); err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { _ = cpu.SetMatmulBackend("auto") })
			dev, err := cpu.New(device.Options{PoisonFreed: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			t.Logf("matmul: %s", cpu.MatmulBackend())
			goldenLlama(t, dev)
		})
	}
}

func goldenLlama(t *testing.T, dev device.Device) {
	weights, wmeta, err := nn.LoadTensors(llamaDir+"llama.safetensors", dev)
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 testdata/llama/gen.py)", err)
	}
	for _, w := range weights {
		w.Release()
	}
	cfg := llamaGoldenConfig(t, wmeta)
	io, iometa, err := nn.LoadTensors(llamaDir+"llama_io.safetensors", dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range io {
			x.Release()
		}
	}()
	// The model made by NewLlama, then loaded from PyTorch's file under
	// Hugging Face's names.
	m, err := nn.NewLlama(dev, cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	if err := nn.LoadSafetensors(llamaDir+"llama.safetensors", m); err != nil {
		t.Fatal(err)
	}
	// The rotary tables.
	cos, sin := ferry.RotaryTables(dev, cfg.Seq, cfg.Embd/cfg.Heads, cfg.RopeTheta)
	defer cos.Release()
	defer sin.Release()
	for name, got := range map[string]*ferry.Tensor{"cos": cos, "sin": sin} {
		e, _ := maxErr(got.Float32s(), io[name].Float32s())
		t.Logf("rotary %s: max error %.3g", name, e)
		if e > 1e-6 {
			t.Errorf("rotary %s differs from PyTorch's by %.3g", name, e)
		}
	}
	f := func(k string) float32 {
		v, err := strconv.ParseFloat(iometa[k], 32)
		if err != nil {
			t.Fatalf("metadata %s: %v", k, err)
		}
		return float32(v)
	}
	var decay, noDecay []*ferry.Tensor
	for _, p := range m.Parameters() {
		if p.Rank() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	opts := []*optim.AdamW{optim.NewAdamW(decay, f("lr")), optim.NewAdamW(noDecay, f("lr"))}
	opts[0].WeightDecay, opts[1].WeightDecay = f("weight_decay"), 0
	for _, o := range opts {
		o.Beta1, o.Beta2, o.Eps = f("beta1"), f("beta2"), f("eps")
		defer o.Release()
	}
	tokens, targets := io["tokens"], io["targets"]
	losses := io["losses"].Float32s()
	B, T := tokens.Dim(1), tokens.Dim(2)
	worstLoss := 0.0
	for step := range losses {
		tok := ferry.FromInt32s(dev, tokens.Int32s()[step*B*T:(step+1)*B*T], B, T)
		tgt := ferry.FromInt32s(dev, targets.Int32s()[step*B*T:(step+1)*B*T], B, T)
		var loss float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			logits := m.Forward(tape.Input(tok))
			if step == 0 {
				e, s := maxErr(logits.Float32s(), io["logits0"].Float32s())
				t.Logf("logits: max error %.3g (max |logit| %.3g)", e, s)
				if e > 1e-4*s {
					t.Errorf("logits differ from PyTorch's by %.3g, over 1e-4 of %.3g", e, s)
				}
			}
			l := ferry.CrossEntropy(logits, tape.Input(tgt))
			loss = l.Float32s()[0]
			return l.Backward()
		})
		tok.Release()
		tgt.Release()
		if err != nil {
			t.Fatal(err)
		}
		d := math.Abs(float64(loss - losses[step]))
		worstLoss = math.Max(worstLoss, d)
		if d > 1e-4*math.Abs(float64(losses[step])) {
			t.Errorf("step %d: loss %v, PyTorch %v", step, loss, losses[step])
		}
		if step == 0 {
			worst := 0.0
			for _, n := range nn.NamedParameters(m) {
				e, s := maxErr(n.Tensor.Grad().Float32s(), io["grad."+n.Name].Float32s())
				worst = math.Max(worst, e/s)
				if e > 1e-5*s {
					t.Errorf("gradient of %s differs from PyTorch's by %.3g, over 1e-5 of %.3g", n.Name, e, s)
				}
			}
			t.Logf("first-step gradients: worst max error %.3g relative to the tensor's max", worst)
		}
		for _, o := range opts {
			if err := o.Step(); err != nil {
				t.Fatal(err)
			}
			o.ZeroGrad()
		}
	}
	t.Logf("losses of %d steps: max error %.3g", len(losses), worstLoss)
	worst := 0.0
	for _, n := range nn.NamedParameters(m) {
		e, s := maxErr(n.Tensor.Float32s(), io["final."+n.Name].Float32s())
		worst = math.Max(worst, e/s)
		if e > 1e-4*s {
			t.Errorf("%s after %d steps differs from PyTorch's by %.3g, over 1e-4 of %.3g", n.Name, len(losses), e, s)
		}
	}
	t.Logf("parameters after %d AdamW steps: worst max error %.3g relative to the tensor's max", len(losses), worst)
}

// llamaSavedPerBlock counts, on the meta device, what a Llama's forward
// saves per block, as testdata/llama/gen.py counts PyTorch's: each
// storage once at its full size, parameters excluded, charged to the
// block that saved it first.
func llamaSavedPerBlock(t *testing.T, cfg nn.LlamaConfig, batch int) []int64 {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	m, err := nn.NewLlama(dev, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	seen := map[any]bool{}
	per := make([]int64, cfg.Layers)
	hooks := &ferry.SavedTensorHooks{
		Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
			if !info.Parameter && !seen[x.Storage()] {
				seen[x.Storage()] = true
				if rest, ok := strings.CutPrefix(info.Module, "model.layers."); ok {
					i, _ := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
					per[i] += x.StorageBytes()
				}
			}
			return x
		},
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	tok := ferry.FromInt32s(dev, make([]int32, batch*cfg.Seq), batch, cfg.Seq)
	defer tok.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		tape.WithHooks(hooks, func() { m.Forward(tape.Input(tok)) }) //ferry:discard the tape owns the output
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return per
}

// Ferry saves no more per block than PyTorch's eager reference, at the
// golden size and at TinyLlama's width (numbers from gen.py).
func TestLlamaSavesLessThanPyTorchPerBlock(t *testing.T) {
	_, iometa, err := nn.LoadTensors(llamaDir+"llama_io.safetensors", cpuDev(t))
	if err != nil {
		t.Fatal(err)
	}
	_, wmeta, err := nn.LoadTensors(llamaDir+"llama.safetensors", cpuDev(t))
	if err != nil {
		t.Fatal(err)
	}
	pytorch := func(k string) int64 {
		v, err := strconv.ParseInt(iometa[k], 10, 64)
		if err != nil {
			t.Fatalf("metadata %s: %v", k, err)
		}
		return v
	}
	golden := llamaGoldenConfig(t, wmeta)
	tiny := nn.LlamaConfig{Vocab: 256, Seq: 1024, Layers: 1, Heads: 32, KVHeads: 4, Embd: 2048, Hidden: 5632, NormEps: 1e-5}
	for _, c := range []struct {
		name  string
		cfg   nn.LlamaConfig
		batch int
		key   string
	}{{"golden", golden, 2, "saved.golden."}, {"tinyllama", tiny, 1, "saved.tinyllama."}} {
		per := llamaSavedPerBlock(t, c.cfg, c.batch)
		for i, got := range per {
			want := pytorch(c.key + strconv.Itoa(i))
			t.Logf("%s block %d: ferry saves %d bytes, PyTorch 1.13 eager %d (%.1f%%)", c.name, i, got, want, 100*float64(got)/float64(want))
			if got > want || got == 0 {
				t.Errorf("%s block %d: ferry saves %d bytes, PyTorch %d", c.name, i, got, want)
			}
		}
	}
}
