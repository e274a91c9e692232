package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"ferry"
	"ferry/device"
)

// GPT-2 in nanoGPT's structure (model.py) with PyTorch's parameter names:
// token and position embeddings, pre-LN blocks of causal self-attention and
// a tanh-GELU MLP, a final LayerNorm, and an output head tied to the token
// embedding (one parameter, transformer.wte.weight).

// GPTConfig sizes a GPT. GPT-2 124M is {Vocab: 50257, Seq: 1024, Layers: 12,
// Heads: 12, Embd: 768, Bias: true}.
type GPTConfig struct {
	Vocab, Seq, Layers, Heads, Embd int
	Dropout                         float32 // on embeddings, attention weights and residual branches
	Bias                            bool    // biases in Linear layers and LayerNorms (GPT-2: true)
	Seed                            uint64  // the dropout masks' seed
}

// Validate says what is wrong with c, if anything.
func (c GPTConfig) Validate() error {
	switch {
	case c.Vocab < 1 || c.Seq < 1 || c.Layers < 1 || c.Heads < 1 || c.Embd < 1:
		return fmt.Errorf("nn: GPT sizes must be positive (vocab %d, seq %d, layers %d, heads %d, embd %d)", c.Vocab, c.Seq, c.Layers, c.Heads, c.Embd)
	case c.Embd%c.Heads != 0:
		return fmt.Errorf("nn: GPT embedding width %d is not a multiple of the %d heads", c.Embd, c.Heads)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("nn: GPT dropout must be in [0, 1), got %v", c.Dropout)
	}
	return nil
}

// ParameterCount is the number of parameters a GPT of c has, the tied head
// counted once (nanoGPT's count, position embeddings included).
func (c GPTConfig) ParameterCount() int64 {
	C, b := int64(c.Embd), int64(0)
	if c.Bias {
		b = 1
	}
	ln := C + b*C
	block := 2*ln + (3*C*C + b*3*C) + (C*C + b*C) + (4*C*C + b*4*C) + (4*C*C + b*C)
	return int64(c.Vocab)*C + int64(c.Seq)*C + int64(c.Layers)*block + ln
}

// CausalSelfAttention is nanoGPT's: one Linear to q, k, v, causal scaled
// dot-product attention over Heads heads, dropout on the weights, an
// output projection and dropout on the result.
type CausalSelfAttention struct {
	CAttn, CProj        *Linear
	Heads               int
	AttnDrop, ResidDrop *Dropout
}

func (a *CausalSelfAttention) Parameters() []*ferry.Tensor {
	return append(a.CAttn.Parameters(), a.CProj.Parameters()...)
}

func (a *CausalSelfAttention) NamedParameters() []Named {
	return append(Prefixed("c_attn", a.CAttn), Prefixed("c_proj", a.CProj)...)
}

// Forward maps x [B, T, C] to [B, T, C].
func (a *CausalSelfAttention) Forward(x *ferry.Tensor) *ferry.Tensor {
	s := x.Shape()
	B, T, C := s[0], s[1], s[2]
	H := a.Heads
	qkv := scoped(x, "c_attn", a.CAttn.Forward)
	parts := qkv.Split(C, 2)
	qkv.Release()
	var hs [3]*ferry.Tensor
	for i, p := range parts {
		v := p.Reshape(B, T, H, C/H) // a view: splits the last axis
		p.Release()
		hs[i] = v.Transpose(1, 2) // [B, H, T, D]
		v.Release()
	}
	opts := ferry.AttentionOptions{Causal: true}
	if a.AttnDrop.active() {
		// The weights are [B, H, T, T]: H·T·T elements per batch row.
		opts.Dropout, opts.Key = a.AttnDrop.P, a.AttnDrop.key(H*T*T)
	}
	y := ferry.ScaledDotProductAttention(hs[0], hs[1], hs[2], opts)
	for _, h := range hs {
		h.Release()
	}
	yt := y.Transpose(1, 2) // [B, T, H, D]
	y.Release()
	y2 := yt.Reshape(B, T, C) // a copy, as nanoGPT's .contiguous().view()
	yt.Release()
	out := scoped(y2, "c_proj", a.CProj.Forward)
	y2.Release()
	return releaseInto(out, a.ResidDrop.Forward)
}

// MLP is nanoGPT's: Linear to 4C, tanh GELU, Linear back, dropout.
type MLP struct {
	CFc, CProj *Linear
	Drop       *Dropout
}

func (m *MLP) Parameters() []*ferry.Tensor {
	return append(m.CFc.Parameters(), m.CProj.Parameters()...)
}

func (m *MLP) NamedParameters() []Named {
	return append(Prefixed("c_fc", m.CFc), Prefixed("c_proj", m.CProj)...)
}

// Forward runs c_fc and the GELU as one fused op (ferry.LinearGELUTanh:
// the same ops recorded, c_fc's in scope "c_fc" and the GELU's in the
// MLP's own, the same saves and allocations as the two ops).
func (m *MLP) Forward(x *ferry.Tensor) *ferry.Tensor {
	g := scoped(x, "c_fc", func(x *ferry.Tensor) *ferry.Tensor {
		y, _ := ferry.LinearEpilogue(x, m.CFc.Weight, m.CFc.Bias, ferry.EpilogueGELUTanh, ferry.EpilogueParentScope) // always fused
		return y
	})
	o := scoped(g, "c_proj", m.CProj.Forward)
	g.Release()
	return releaseInto(o, m.Drop.Forward)
}

// Block is a pre-LN transformer block: x + attn(ln_1(x)), then
// x + mlp(ln_2(x)).
type Block struct {
	LN1  *LayerNorm
	Attn *CausalSelfAttention
	LN2  *LayerNorm
	MLP  *MLP
}

func (b *Block) Parameters() []*ferry.Tensor {
	ps := b.LN1.Parameters()
	ps = append(ps, b.Attn.Parameters()...)
	ps = append(ps, b.LN2.Parameters()...)
	return append(ps, b.MLP.Parameters()...)
}

func (b *Block) NamedParameters() []Named {
	ns := Prefixed("ln_1", b.LN1)
	ns = append(ns, Prefixed("attn", b.Attn)...)
	ns = append(ns, Prefixed("ln_2", b.LN2)...)
	return append(ns, Prefixed("mlp", b.MLP)...)
}

func (b *Block) Forward(x *ferry.Tensor) *ferry.Tensor {
	h := scoped(x, "ln_1", b.LN1.Forward)
	a := scoped(h, "attn", b.Attn.Forward)
	h.Release()
	// The residual sum and ln_2 in one pass where the device fuses them
	// (the same ops, saves and bits as Add then ln_2's LayerNorm); a lives
	// until both are made.
	x1, h := ferry.AddLayerNorm(x, a, b.LN2.Weight, b.LN2.Bias, b.LN2.Eps, "ln_2")
	a.Release()
	m := scoped(h, "mlp", b.MLP.Forward)
	h.Release()
	out := ferry.Add(x1, m)
	m.Release()
	x1.Release()
	return out
}

// GPT is the whole model. Forward takes int32 tokens [B, T] (T ≤ Seq) and
// returns logits [B, T, Vocab].
type GPT struct {
	Config GPTConfig
	WTE    *Embedding // tied: also the output head (lm_head.weight)
	WPE    *Embedding
	Drop   *Dropout
	H      []*Block
	LNF    *LayerNorm
	// Dropout holds the seed, step and train/eval mode of every dropout
	// site of the model.
	Dropout *DropoutState
	// CheckpointBlocks runs each block as an activation-checkpointed
	// segment (ferry.Tape.Checkpoint): forward keeps only the blocks'
	// inputs, backward recomputes each block. Gradients are unchanged,
	// bit for bit. Without it each block is a ferry.Tape.Segment named
	// transformer.h.N, recomputed where the tape's SegmentHooks say.
	CheckpointBlocks bool
}

// NewGPT makes a GPT on dev initialised as nanoGPT does: weights normal
// with std 0.02 (the residual projections c_proj 0.02/√(2·Layers)), biases
// zero, LayerNorms ones and zeros. It starts in training mode at step 0.
func NewGPT(dev device.Device, cfg GPTConfig, rng *rand.Rand) (*GPT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := map[string]*ferry.Tensor{}
	err := ferry.Catch(func() error {
		C, L := cfg.Embd, cfg.Layers
		proj := float32(0.02 / math.Sqrt(2*float64(L)))
		lin := func(name string, out, in int, std float32) {
			w[name+".weight"] = normal(dev, rng, std, out, in)
			if cfg.Bias {
				w[name+".bias"] = ferry.ZerosAs(dev, device.Parameter, out)
			}
		}
		ln := func(name string) {
			w[name+".weight"] = ferry.Ones(dev, C).SetCategory(device.Parameter)
			if cfg.Bias {
				w[name+".bias"] = ferry.ZerosAs(dev, device.Parameter, C)
			}
		}
		w["transformer.wte.weight"] = normal(dev, rng, 0.02, cfg.Vocab, C)
		w["transformer.wpe.weight"] = normal(dev, rng, 0.02, cfg.Seq, C)
		for i := 0; i < L; i++ {
			h := fmt.Sprintf("transformer.h.%d.", i)
			ln(h + "ln_1")
			lin(h+"attn.c_attn", 3*C, C, 0.02)
			lin(h+"attn.c_proj", C, C, proj)
			ln(h + "ln_2")
			lin(h+"mlp.c_fc", 4*C, C, 0.02)
			lin(h+"mlp.c_proj", C, 4*C, proj)
		}
		ln("transformer.ln_f")
		return nil
	})
	if err != nil {
		for _, t := range w {
			t.Release()
		}
		return nil, err
	}
	return NewGPTFromWeights(cfg, w)
}

// GPTParameterNames lists a GPT's parameters under PyTorch's names, in
// nanoGPT's order (named_parameters; the tied head appears once, as
// transformer.wte.weight).
func GPTParameterNames(cfg GPTConfig) []string {
	names := []string{"transformer.wte.weight", "transformer.wpe.weight"}
	lin := func(n string) {
		names = append(names, n+".weight")
		if cfg.Bias {
			names = append(names, n+".bias")
		}
	}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("transformer.h.%d.", i)
		lin(h + "ln_1")
		lin(h + "attn.c_attn")
		lin(h + "attn.c_proj")
		lin(h + "ln_2")
		lin(h + "mlp.c_fc")
		lin(h + "mlp.c_proj")
	}
	lin("transformer.ln_f")
	return names
}

// NewGPTFromWeights builds a GPT from tensors named as PyTorch names them
// (a state dict; lm_head.weight, if present, must be the same tensor as
// transformer.wte.weight). The model takes the tensors over as its
// parameters. Every missing, unexpected or misshapen tensor is reported at
// once.
func NewGPTFromWeights(cfg GPTConfig, w map[string]*ferry.Tensor) (*GPT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	C := cfg.Embd
	want := map[string][]int{"transformer.wte.weight": {cfg.Vocab, C}, "transformer.wpe.weight": {cfg.Seq, C}}
	ln := func(n string) {
		want[n+".weight"] = []int{C}
		if cfg.Bias {
			want[n+".bias"] = []int{C}
		}
	}
	lin := func(n string, out, in int) {
		want[n+".weight"] = []int{out, in}
		if cfg.Bias {
			want[n+".bias"] = []int{out}
		}
	}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("transformer.h.%d.", i)
		ln(h + "ln_1")
		lin(h+"attn.c_attn", 3*C, C)
		lin(h+"attn.c_proj", C, C)
		ln(h + "ln_2")
		lin(h+"mlp.c_fc", 4*C, C)
		lin(h+"mlp.c_proj", C, 4*C)
	}
	ln("transformer.ln_f")
	var problems []string
	for _, n := range GPTParameterNames(cfg) {
		t, ok := w[n]
		switch {
		case !ok:
			problems = append(problems, "missing "+n)
		case !slices.Equal(t.Shape(), want[n]):
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v", n, t.Shape(), want[n]))
		}
	}
	for n, t := range w {
		if _, ok := want[n]; ok {
			continue
		}
		if n == "lm_head.weight" && t == w["transformer.wte.weight"] {
			continue
		}
		problems = append(problems, "unexpected "+n)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("nn: GPT weights do not match the config: %v", problems)
	}
	for n, t := range w {
		if n != "lm_head.weight" {
			NewParameter(t, n)
		}
	}
	state := &DropoutState{Seed: cfg.Seed, Training: true}
	drop := func(path string) *Dropout { return &Dropout{P: cfg.Dropout, Op: OpID(path), State: state} }
	linear := func(n string) *Linear { return &Linear{Weight: w[n+".weight"], Bias: w[n+".bias"]} }
	layerNorm := func(n string) *LayerNorm { return &LayerNorm{Weight: w[n+".weight"], Bias: w[n+".bias"], Eps: 1e-5} }
	g := &GPT{Config: cfg, WTE: &Embedding{w["transformer.wte.weight"]}, WPE: &Embedding{w["transformer.wpe.weight"]},
		Drop: drop("transformer.drop"), LNF: layerNorm("transformer.ln_f"), Dropout: state}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("transformer.h.%d.", i)
		g.H = append(g.H, &Block{
			LN1: layerNorm(h + "ln_1"),
			Attn: &CausalSelfAttention{CAttn: linear(h + "attn.c_attn"), CProj: linear(h + "attn.c_proj"), Heads: cfg.Heads,
				AttnDrop: drop(h + "attn.attn_dropout"), ResidDrop: drop(h + "attn.resid_dropout")},
			LN2: layerNorm(h + "ln_2"),
			MLP: &MLP{CFc: linear(h + "mlp.c_fc"), CProj: linear(h + "mlp.c_proj"), Drop: drop(h + "mlp.dropout")},
		})
	}
	return g, nil
}

// SetTraining switches dropout on (true) or off (eval).
func (g *GPT) SetTraining(on bool) { g.Dropout.Training = on }

// SetStep sets the step that keys the dropout masks; a training loop calls
// it (or increments g.Dropout.Step) once per optimizer step.
func (g *GPT) SetStep(step uint64) { g.Dropout.Step = step }

// SetFirstRow sets the global batch row of this process's first row
// (DropoutState.FirstRow).
func (g *GPT) SetFirstRow(row uint64) { g.Dropout.FirstRow = row }

// Parameters lists every parameter once, in nanoGPT's order, named as
// PyTorch names them.
func (g *GPT) Parameters() []*ferry.Tensor {
	ps := []*ferry.Tensor{g.WTE.Weight, g.WPE.Weight}
	for _, b := range g.H {
		ps = append(ps, b.Parameters()...)
	}
	return append(ps, g.LNF.Parameters()...)
}

// NamedParameters names the parameters as PyTorch does, in nanoGPT's
// order (GPTParameterNames).
func (g *GPT) NamedParameters() []Named {
	ns := append(Prefixed("transformer.wte", g.WTE), Prefixed("transformer.wpe", g.WPE)...)
	for i, b := range g.H {
		ns = append(ns, Prefixed("transformer.h."+moduleName(i), b)...)
	}
	return append(ns, Prefixed("transformer.ln_f", g.LNF)...)
}

// Forward maps int32 tokens [B, T] to logits [B, T, Vocab]. On a tape,
// modules run in scopes named as PyTorch names them (transformer.h.3.attn),
// so saved tensors carry those paths.
func (g *GPT) Forward(tokens *ferry.Tensor) *ferry.Tensor {
	T := tokenLength("gpt", tokens, g.Config.Seq)
	tp := tokens.Tape()
	push, pop := scopeFuncs(tp)
	push("transformer")
	tok := scoped(tokens, "wte", g.WTE.Forward)
	wpe := g.WPE.Weight
	if tp != nil {
		wpe = tp.Input(wpe)
	} else {
		wpe = wpe.Detach()
	}
	pos := wpe.Narrow(0, 0, T) // wpe[:T]
	wpe.Release()
	x := ferry.Add(tok, pos)
	tok.Release()
	pos.Release()
	x = releaseInto(x, g.Drop.Forward)
	x = runBlocks(tp, x, len(g.H), "h.", g.CheckpointBlocks, func(i int, xs ...*ferry.Tensor) *ferry.Tensor { return g.H[i].Forward(xs[0]) })
	h := scoped(x, "ln_f", g.LNF.Forward)
	x.Release()
	pop()
	push("lm_head")
	logits := ferry.Linear(h, g.WTE.Weight, nil) // tied to wte
	pop()
	h.Release()
	return logits
}

// Context is the longest sequence the model takes (Config.Seq).
func (g *GPT) Context() int { return g.Config.Seq }

// Vocab is the vocabulary size.
func (g *GPT) Vocab() int { return g.Config.Vocab }

// SetRecompute makes Forward checkpoint every block (CheckpointBlocks).
func (g *GPT) SetRecompute(on bool) { g.CheckpointBlocks = on }
