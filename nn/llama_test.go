package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/offload"
)

func TestLlamaConfig(t *testing.T) {
	llama2 := nn.LlamaConfig{Vocab: 32000, Seq: 4096, Layers: 32, Heads: 32, KVHeads: 32, Embd: 4096, Hidden: 11008}
	if n := llama2.ParameterCount(); n != 6_738_415_616 {
		t.Errorf("Llama 2 7B: %d parameters, Hugging Face counts 6,738,415,616", n)
	}
	for _, c := range []nn.LlamaConfig{
		{},
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 4, KVHeads: 3, Embd: 16, Hidden: 8}, // 4 % 3
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 2, KVHeads: 4, Embd: 16, Hidden: 8}, // more KV heads than heads
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 3, KVHeads: 3, Embd: 16, Hidden: 8}, // 16 % 3
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 2, KVHeads: 1, Embd: 6, Hidden: 8},  // odd head width
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 2, KVHeads: 1, Embd: 8, Hidden: 0},
		{Vocab: 10, Seq: 4, Layers: 1, Heads: 2, KVHeads: 1, Embd: 8, Hidden: 8, RopeTheta: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TinyLlama 1.1B (grouped-query: 32 heads, 4 KV heads) on the meta
// device: its parameter count, Hugging Face's names and order, and one
// training step.
func TestTinyLlamaOnMeta(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	cfg := nn.LlamaConfig{Vocab: 32000, Seq: 2048, Layers: 22, Heads: 32, KVHeads: 4, Embd: 2048, Hidden: 5632, NormEps: 1e-5}
	m, err := nn.NewLlama(dev, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	var n int64
	var names []string
	for _, p := range nn.NamedParameters(m) {
		n += int64(p.Tensor.Numel())
		names = append(names, p.Name)
		if p.Tensor.Name() != p.Name {
			t.Errorf("parameter %s is labelled %q", p.Name, p.Tensor.Name())
		}
	}
	if n != 1_100_048_384 || cfg.ParameterCount() != n {
		t.Errorf("TinyLlama has %d parameters (config says %d), Hugging Face counts 1,100,048,384", n, cfg.ParameterCount())
	}
	if !slices.Equal(names, nn.LlamaParameterNames(cfg)) {
		t.Errorf("names %v..., want %v...", names[:12], nn.LlamaParameterNames(cfg)[:12])
	}
	if got := m.Layers[3].Attn.KProj.Weight.Shape(); !slices.Equal(got, []int{256, 2048}) {
		t.Errorf("k_proj is %v, want [256 2048]", got)
	}
	tok := ferry.FromInt32s(dev, make([]int32, 2*512), 2, 512)
	defer tok.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		logits := m.Forward(tape.Input(tok))
		if s := logits.Shape(); !slices.Equal(s, []int{2, 512, 32000}) {
			t.Errorf("logits %v", s)
		}
		return ferry.CrossEntropy(logits, tape.Input(tok)).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parameters() {
		if p.Grad() == nil {
			t.Fatalf("%s has no gradient", p.Name())
		}
	}
}

func smallLlama(t *testing.T, dev device.Device) *nn.Llama {
	m, err := nn.NewLlama(dev, nn.LlamaConfig{Vocab: 29, Seq: 12, Layers: 2, Heads: 4, KVHeads: 2, Embd: 32, Hidden: 40}, rand.New(rand.NewPCG(6, 7)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(m) })
	return m
}

// Checkpointed blocks give the gradients of the plain run, bit for bit,
// and keep less.
func TestLlamaCheckpointBlocks(t *testing.T) {
	dev := cpuDev(t)
	rng := rand.New(rand.NewPCG(1, 1))
	toks := make([]int32, 3*12)
	for i := range toks {
		toks[i] = int32(rng.IntN(29))
	}
	tok := ferry.FromInt32s(dev, toks, 3, 12)
	defer tok.Release()
	run := func(checkpoint bool) (map[string][]float32, int) {
		m := smallLlama(t, dev)
		m.CheckpointBlocks = checkpoint
		saves := 0
		hooks := &ferry.SavedTensorHooks{
			Pack:   func(x *ferry.Tensor, info ferry.SaveInfo) any { saves++; return x },
			Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
		}
		err := ferry.Step(func(tape *ferry.Tape) error {
			var loss *ferry.Tensor
			tape.WithHooks(hooks, func() { loss = ferry.CrossEntropy(m.Forward(tape.Input(tok)), tape.Input(tok)) })
			return loss.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		g := map[string][]float32{}
		for _, n := range nn.NamedParameters(m) {
			g[n.Name] = n.Tensor.Grad().Float32s()
		}
		return g, saves
	}
	plain, nPlain := run(false)
	ckpt, nCkpt := run(true)
	for n, want := range plain {
		if !slices.Equal(ckpt[n], want) {
			t.Errorf("%s: checkpointed gradient differs", n)
		}
	}
	if nCkpt >= nPlain {
		t.Errorf("checkpointed blocks save %d tensors through the outer hooks, plain %d", nCkpt, nPlain)
	}
}

// A block runs by itself (making its own rotary tables) as it runs in
// the model.
func TestLlamaBlockAlone(t *testing.T) {
	dev := cpuDev(t)
	m := smallLlama(t, dev)
	x := ferry.Randn(dev, rand.New(rand.NewPCG(2, 2)), 2, 12, 32)
	defer x.Release()
	a := m.Layers[0].Forward(x)
	defer a.Release()
	cos, sin := ferry.RotaryTables(dev, 12, 8, 10000)
	defer cos.Release()
	defer sin.Release()
	b := m.Layers[0].ForwardRotary(x, cos, sin)
	defer b.Release()
	if !slices.Equal(a.Float32s(), b.Float32s()) {
		t.Error("Forward and ForwardRotary differ")
	}
	err := ferry.Catch(func() error {
		tok := ferry.FromInt32s(dev, make([]int32, 13), 1, 13)
		defer tok.Release()
		m.Forward(tok) //ferry:discard it panics: the sequence is too long
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "1 to 12") {
		t.Errorf("a sequence longer than Seq: %v", err)
	}
}

// Every memory mode, and a block recomputed through the tape's segment
// hooks (as a plan's policy does), gives the plain run's loss and
// gradients bit for bit.
func TestLlamaMemoryModesAreBitwise(t *testing.T) {
	dev, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := smallLlama(t, dev)
	rng := rand.New(rand.NewPCG(8, 8))
	toks := make([]int32, 2*12)
	for i := range toks {
		toks[i] = int32(rng.IntN(29))
	}
	tok := ferry.FromInt32s(dev, toks, 2, 12)
	defer tok.Release()
	run := func(mode offload.Mode, segs *ferry.SegmentHooks) (float32, [][]float32) {
		cfg := offload.DefaultConfig()
		cfg.MinBytes = 0 // move even the small tensors of this model
		mem, err := offload.NewMemory(dev, offload.Setup{Mode: mode, DiskDir: t.TempDir(), Config: &cfg})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		m.CheckpointBlocks = mem.Recompute()
		defer func() { m.CheckpointBlocks = false }()
		var loss float32
		err = ferry.Step(func(tape *ferry.Tape) error {
			if segs != nil {
				tape.SetSegmentHooks(segs)
			}
			var logits *ferry.Tensor
			mem.Forward(tape, func() { logits = m.Forward(tape.Input(tok)) })
			l := ferry.CrossEntropy(logits, tape.Input(tok))
			loss = l.Float32s()[0]
			return l.Backward()
		})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var gs [][]float32
		for _, p := range m.Parameters() {
			gs = append(gs, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		return loss, gs
	}
	l0, g0 := run(offload.None, nil)
	var entered []string
	segs := &ferry.SegmentHooks{
		Enter:     func(module string, _ []*ferry.Tensor) { entered = append(entered, module) },
		Recompute: func(module string) bool { return module == "model.layers.1" },
	}
	cases := map[string]func() (float32, [][]float32){"segment model.layers.1": func() (float32, [][]float32) { return run(offload.None, segs) }}
	for _, mode := range offload.Modes()[1:] {
		cases[string(mode)] = func() (float32, [][]float32) { return run(mode, nil) }
	}
	for name, f := range cases {
		l, g := f()
		if math.Float32bits(l) != math.Float32bits(l0) {
			t.Errorf("%s: loss %v, plain %v", name, l, l0)
		}
		for i := range g {
			if !slices.Equal(g[i], g0[i]) {
				t.Errorf("%s: gradient of %s differs from the plain run's", name, m.Parameters()[i].Name())
			}
		}
	}
	if !slices.Equal(entered, []string{"model.layers.0", "model.layers.1"}) {
		t.Errorf("segments entered: %v", entered)
	}
}
