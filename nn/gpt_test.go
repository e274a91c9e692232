package nn_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
)

func TestGPT2SmallOnMeta(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	cfg := nn.GPTConfig{Vocab: 50257, Seq: 1024, Layers: 12, Heads: 12, Embd: 768, Bias: true}
	m, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	var n int64
	names := map[string]bool{}
	for _, p := range m.Parameters() {
		n += int64(p.Numel())
		if names[p.Name()] {
			t.Errorf("%s listed twice", p.Name())
		}
		names[p.Name()] = true
	}
	if n != 124_439_808 || cfg.ParameterCount() != n {
		t.Errorf("GPT-2 124M has %d parameters (config says %d), nanoGPT counts 124,439,808", n, cfg.ParameterCount())
	}
	for _, want := range []string{"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.11.mlp.c_proj.bias", "transformer.ln_f.weight"} {
		if !names[want] {
			t.Errorf("no parameter %s", want)
		}
	}
	if names["lm_head.weight"] {
		t.Error("the tied head is listed apart from wte")
	}
	// One step at batch 2 × 1024 on meta: forward, loss, backward.
	tok := ferry.FromInt32s(dev, make([]int32, 2*1024), 2, 1024)
	defer tok.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		logits := m.Forward(tape.Input(tok))
		if s := logits.Shape(); s[0] != 2 || s[1] != 1024 || s[2] != 50257 {
			t.Errorf("logits %v", s)
		}
		return ferry.CrossEntropy(logits, tape.Input(tok)).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGPTConfigErrors(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	for _, c := range []nn.GPTConfig{{}, {Vocab: 10, Seq: 4, Layers: 1, Heads: 3, Embd: 8}, {Vocab: 10, Seq: 4, Layers: 1, Heads: 2, Embd: 8, Dropout: 1}, {Vocab: -1, Seq: 4, Layers: 1, Heads: 2, Embd: 8}} {
		if _, err := nn.NewGPT(dev, c, rand.New(rand.NewPCG(1, 1))); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	m, _ := nn.NewGPT(dev, nn.GPTConfig{Vocab: 10, Seq: 4, Layers: 1, Heads: 2, Embd: 8}, rand.New(rand.NewPCG(1, 1)))
	tok := ferry.FromInt32s(dev, make([]int32, 5), 1, 5)
	err := ferry.Step(func(tape *ferry.Tape) error { m.Forward(tape.Input(tok)); return nil }) //ferry:discard the tape owns the output
	if err == nil {
		t.Error("a sequence longer than Seq was accepted")
	}
}

func smallGPT(t *testing.T, dev device.Device, dropout float32) *nn.GPT {
	m, err := nn.NewGPT(dev, nn.GPTConfig{Vocab: 23, Seq: 16, Layers: 2, Heads: 4, Embd: 32, Dropout: dropout, Bias: true, Seed: 9},
		rand.New(rand.NewPCG(4, 5)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(m) })
	return m
}

// TestTiedWeightGradient: wte's gradient is the sum of its two uses, and an
// optimizer given the tensor twice updates it once.
func TestTiedWeightGradient(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	m := smallGPT(t, dev, 0)
	tok := ferry.FromInt32s(dev, []int32{1, 2, 3, 4, 5, 6, 7, 8}, 2, 4)
	defer tok.Release()
	grad := func() []float32 {
		err := ferry.Step(func(tape *ferry.Tape) error {
			return ferry.CrossEntropy(m.Forward(tape.Input(tok)), tape.Input(tok)).Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		g := m.WTE.Weight.Grad().Float32s()
		m.WTE.Weight.SetGrad(nil)
		for _, p := range m.Parameters() {
			p.SetGrad(nil)
		}
		return g
	}
	tied := grad()
	// A weight used twice (embedding and head) against each use alone.
	head := nn.NewParameter(m.WTE.Weight.Clone().Detach(), "lm_head.weight")
	defer head.Release()
	embGrad := useGrad(t, m, tok, func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor {
		e := ferry.Embedding(m.WTE.Weight, x)
		return ferry.Sum(ferry.Square(e))
	})
	headGrad := useGrad(t, m, tok, func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor {
		e := ferry.Embedding(head, x)
		return ferry.Sum(ferry.Square(ferry.Linear(e, m.WTE.Weight, nil)))
	})
	both := useGrad(t, m, tok, func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor {
		e := ferry.Embedding(m.WTE.Weight, x)
		a := ferry.Sum(ferry.Square(e))
		eh := ferry.Embedding(head, x)
		return ferry.Add(a, ferry.Sum(ferry.Square(ferry.Linear(eh, m.WTE.Weight, nil))))
	})
	for i := range both {
		if d := math.Abs(float64(both[i] - (embGrad[i] + headGrad[i]))); d > 1e-5*(1+math.Abs(float64(both[i]))) {
			t.Fatalf("gradient %d of a weight used twice: %v, the uses give %v + %v", i, both[i], embGrad[i], headGrad[i])
		}
	}
	if len(tied) != len(both) || tied[0] == 0 {
		t.Fatal("the model's tied weight got no gradient")
	}
	// An optimizer given the tied weight twice updates it once.
	w := m.WTE.Weight
	before := w.Float32s()
	w.SetGrad(ferry.Ones(dev, w.Shape()...))
	opt := optim.NewSGD([]*ferry.Tensor{w, w}, 0.5)
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	after := w.Float32s()
	if d := before[0] - after[0]; math.Abs(float64(d)-0.5) > 1e-6 {
		t.Errorf("one step of lr 0.5 on gradient 1 moved the weight by %v", d)
	}
	w.SetGrad(nil)
	// NewSequential keeps the first name of a module used twice.
	l, _ := nn.NewLinear(dev, 4, 4, true, rand.New(rand.NewPCG(1, 1)))
	s := nn.NewSequential(l, nn.ReLU{}, l)
	if l.Weight.Name() != "0.weight" || len(s.Parameters()) != 2 {
		t.Errorf("shared Linear named %q, %d parameters", l.Weight.Name(), len(s.Parameters()))
	}
	nn.Release(s)
}

func useGrad(t *testing.T, m *nn.GPT, tok *ferry.Tensor, f func(*ferry.Tape, *ferry.Tensor) *ferry.Tensor) []float32 {
	t.Helper()
	err := ferry.Step(func(tape *ferry.Tape) error { return f(tape, tape.Input(tok)).Backward() })
	if err != nil {
		t.Fatal(err)
	}
	g := m.WTE.Weight.Grad().Float32s()
	m.WTE.Weight.SetGrad(nil)
	return g
}

// TestGPTOffloadAndCheckpointAreBitwise: with dropout on, offloading every
// saved tensor and checkpointing every block give the plain run's loss and
// gradients bit for bit.
func TestGPTOffloadAndCheckpointAreBitwise(t *testing.T) {
	dev, _ := cpu.New(device.Options{PoisonFreed: true})
	defer dev.Close()
	m := smallGPT(t, dev, 0.1)
	m.SetStep(3)
	rng := rand.New(rand.NewPCG(7, 7))
	toks := make([]int32, 3*16)
	for i := range toks {
		toks[i] = int32(rng.IntN(23))
	}
	tok := ferry.FromInt32s(dev, toks, 3, 16)
	defer tok.Release()
	run := func(mode string) (float32, [][]float32, int64) {
		var off *offload.Offloader
		if mode == "offload" || mode == "disk" {
			cfg := offload.DefaultConfig()
			cfg.MinBytes = 0
			if mode == "disk" {
				cfg.DiskDir, cfg.HostLimit = t.TempDir(), -1
			}
			var err error
			if off, err = offload.New(dev, cfg); err != nil {
				t.Fatal(err)
			}
			defer off.Close()
		}
		m.CheckpointBlocks = mode == "checkpoint"
		defer func() { m.CheckpointBlocks = false }()
		var loss float32
		var after int64
		err := ferry.Step(func(tape *ferry.Tape) error {
			var logits *ferry.Tensor
			fwd := func() { logits = m.Forward(tape.Input(tok)) }
			if off != nil {
				tape.WithHooks(off.Hooks(), fwd)
			} else {
				fwd()
			}
			after = dev.Allocator().Stats().AllocatedBytes.Current
			l := ferry.CrossEntropy(logits, tape.Input(tok))
			loss = l.Float32s()[0]
			return l.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		var gs [][]float32
		for _, p := range m.Parameters() {
			gs = append(gs, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		return loss, gs, after
	}
	l0, g0, a0 := run("none")
	for _, mode := range []string{"offload", "disk", "checkpoint"} {
		l, g, a := run(mode)
		if math.Float32bits(l) != math.Float32bits(l0) {
			t.Errorf("%s: loss %v, plain %v", mode, l, l0)
		}
		for i := range g {
			for j := range g[i] {
				if math.Float32bits(g[i][j]) != math.Float32bits(g0[i][j]) {
					t.Fatalf("%s: gradient of %s[%d] = %v, plain %v", mode, m.Parameters()[i].Name(), j, g[i][j], g0[i][j])
				}
			}
		}
		if a >= a0 {
			t.Errorf("%s holds %d bytes after forward, plain %d", mode, a, a0)
		}
	}
}
