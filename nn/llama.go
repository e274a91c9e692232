package nn

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"ferry"
	"ferry/device"
)

// A Llama-style decoder in the structure and with the parameter names of
// Hugging Face's LlamaForCausalLM: token embeddings, pre-norm blocks of
// RMSNorm, grouped-query causal self-attention with rotary position
// embeddings ("rotate_half" convention, ferry.RotaryEmbedding) and a
// SwiGLU MLP, a final RMSNorm and an untied output head. No biases, no
// dropout.

// LlamaConfig sizes a Llama. Llama 2 7B is {Vocab: 32000, Seq: 4096,
// Layers: 32, Heads: 32, KVHeads: 32, Embd: 4096, Hidden: 11008,
// RopeTheta: 10000, NormEps: 1e-5}.
type LlamaConfig struct {
	Vocab, Seq, Layers int
	Heads, KVHeads     int // query heads, and key/value heads (grouped-query attention: Heads % KVHeads == 0)
	Embd               int // model width; Embd/Heads is the head width, even
	Hidden             int // the SwiGLU MLP's inner width (intermediate_size)
	RopeTheta          float64
	NormEps            float32
	// Seed seeds NewLlama's initialisation when it is given no generator.
	// (The model has no dropout, so nothing else draws from it.)
	Seed uint64
}

// Defaults of Hugging Face's LlamaConfig for fields left zero.
const (
	DefaultRopeTheta = 10000.0
	DefaultNormEps   = 1e-6
)

// WithDefaults returns c with a zero RopeTheta and NormEps set to Hugging
// Face's defaults (DefaultRopeTheta, DefaultNormEps).
func (c LlamaConfig) WithDefaults() LlamaConfig {
	if c.RopeTheta == 0 {
		c.RopeTheta = DefaultRopeTheta
	}
	if c.NormEps == 0 {
		c.NormEps = DefaultNormEps
	}
	return c
}

// Validate says what is wrong with c, if anything. A zero RopeTheta or
// NormEps stands for the default.
func (c LlamaConfig) Validate() error {
	switch {
	case c.Vocab < 1 || c.Seq < 1 || c.Layers < 1 || c.Heads < 1 || c.KVHeads < 1 || c.Embd < 1 || c.Hidden < 1:
		return fmt.Errorf("nn: Llama sizes must be positive (vocab %d, seq %d, layers %d, heads %d, kv heads %d, embd %d, hidden %d)",
			c.Vocab, c.Seq, c.Layers, c.Heads, c.KVHeads, c.Embd, c.Hidden)
	case c.Embd%c.Heads != 0:
		return fmt.Errorf("nn: Llama embedding width %d is not a multiple of the %d heads", c.Embd, c.Heads)
	case (c.Embd/c.Heads)%2 != 0:
		return fmt.Errorf("nn: Llama head width %d is odd; rotary embeddings rotate pairs", c.Embd/c.Heads)
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("nn: Llama's %d query heads are not a multiple of its %d key/value heads", c.Heads, c.KVHeads)
	case c.RopeTheta < 0 || c.RopeTheta != c.RopeTheta:
		return fmt.Errorf("nn: Llama rope theta must be positive, got %v", c.RopeTheta)
	case c.NormEps < 0 || c.NormEps != c.NormEps:
		return fmt.Errorf("nn: Llama norm eps must be non-negative, got %v", c.NormEps)
	}
	return nil
}

// ParameterCount is the number of parameters of a Llama of c (the head
// is untied and counted).
func (c LlamaConfig) ParameterCount() int64 {
	C, V, F := int64(c.Embd), int64(c.Vocab), int64(c.Hidden)
	kv := C / int64(c.Heads) * int64(c.KVHeads)
	block := 2*C + C*C + 2*kv*C + C*C + 3*C*F
	return 2*V*C + int64(c.Layers)*block + C
}

// LlamaParameterNames lists a Llama's parameters under Hugging Face's
// names, in LlamaForCausalLM's named_parameters() order.
func LlamaParameterNames(cfg LlamaConfig) []string {
	names := []string{"model.embed_tokens.weight"}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("model.layers.%d.", i)
		for _, n := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
			"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"} {
			names = append(names, h+n+".weight")
		}
	}
	return append(names, "model.norm.weight", "lm_head.weight")
}

// llamaShapes maps each parameter name to its shape.
func llamaShapes(cfg LlamaConfig) map[string][]int {
	C, D := cfg.Embd, cfg.Embd/cfg.Heads
	kv := cfg.KVHeads * D
	s := map[string][]int{"model.embed_tokens.weight": {cfg.Vocab, C}, "model.norm.weight": {C}, "lm_head.weight": {cfg.Vocab, C}}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("model.layers.%d.", i)
		s[h+"self_attn.q_proj.weight"] = []int{C, C}
		s[h+"self_attn.k_proj.weight"] = []int{kv, C}
		s[h+"self_attn.v_proj.weight"] = []int{kv, C}
		s[h+"self_attn.o_proj.weight"] = []int{C, C}
		s[h+"mlp.gate_proj.weight"] = []int{cfg.Hidden, C}
		s[h+"mlp.up_proj.weight"] = []int{cfg.Hidden, C}
		s[h+"mlp.down_proj.weight"] = []int{C, cfg.Hidden}
		s[h+"input_layernorm.weight"] = []int{C}
		s[h+"post_attention_layernorm.weight"] = []int{C}
	}
	return s
}

// LlamaAttention is grouped-query causal self-attention with rotary
// position embeddings: Heads query heads share KVHeads key/value heads,
// each key/value head serving Heads/KVHeads query heads (Hugging Face's
// repeat_kv).
type LlamaAttention struct {
	QProj, KProj, VProj, OProj *Linear
	Heads, KVHeads             int
	RopeTheta                  float64 // 0: DefaultRopeTheta
}

func (a *LlamaAttention) Parameters() []*ferry.Tensor { return tensors(a.NamedParameters()) }

func (a *LlamaAttention) NamedParameters() []Named {
	ns := Prefixed("q_proj", a.QProj)
	ns = append(ns, Prefixed("k_proj", a.KProj)...)
	ns = append(ns, Prefixed("v_proj", a.VProj)...)
	return append(ns, Prefixed("o_proj", a.OProj)...)
}

// Forward maps x [B, T, C] to [B, T, C], making the rotary tables of
// its T positions first (a model makes them once for all its blocks and
// calls ForwardRotary).
func (a *LlamaAttention) Forward(x *ferry.Tensor) *ferry.Tensor {
	cos, sin := a.tables(x)
	defer cos.Release()
	defer sin.Release()
	return a.ForwardRotary(x, cos, sin)
}

func (a *LlamaAttention) tables(x *ferry.Tensor) (cos, sin *ferry.Tensor) {
	theta := a.RopeTheta
	if theta == 0 {
		theta = DefaultRopeTheta
	}
	return ferry.RotaryTables(x.Device(), x.Dim(1), x.Dim(2)/a.Heads, theta)
}

// ForwardRotary maps x [B, T, C] to [B, T, C], rotating queries and keys
// by cos and sin [T, D].
func (a *LlamaAttention) ForwardRotary(x, cos, sin *ferry.Tensor) *ferry.Tensor {
	s := x.Shape()
	B, T, C := s[0], s[1], s[2]
	H, KV := a.Heads, a.KVHeads
	D := C / H
	heads := func(name string, l *Linear, n int) *ferry.Tensor {
		p := scoped(x, name, l.Forward)
		v := p.Reshape(B, T, n, D) // a view
		p.Release()
		h := v.Transpose(1, 2) // [B, n, T, D]
		v.Release()
		return h
	}
	// repeat gives each of the KV heads rep copies, as repeat_kv:
	// [B, KV, T, D] → [B, KV, rep, T, D] → [B, H, T, D].
	repeat := func(h *ferry.Tensor) *ferry.Tensor {
		if KV == H {
			return h
		}
		h5 := h.Reshape(B, KV, 1, T, D)
		h.Release()
		copies := make([]*ferry.Tensor, H/KV)
		for i := range copies {
			copies[i] = h5
		}
		r := ferry.Cat(2, copies...)
		h5.Release()
		return releaseInto(r, func(r *ferry.Tensor) *ferry.Tensor { return r.Reshape(B, H, T, D) })
	}
	rope := func(h *ferry.Tensor) *ferry.Tensor {
		return releaseInto(h, func(h *ferry.Tensor) *ferry.Tensor { return ferry.RotaryEmbedding(h, cos, sin) })
	}
	q := rope(heads("q_proj", a.QProj, H))
	k := repeat(rope(heads("k_proj", a.KProj, KV)))
	v := repeat(heads("v_proj", a.VProj, KV))
	y := ferry.ScaledDotProductAttention(q, k, v, ferry.AttentionOptions{Causal: true})
	q.Release()
	k.Release()
	v.Release()
	yt := y.Transpose(1, 2) // [B, T, H, D]
	y.Release()
	y2 := yt.Reshape(B, T, C) // a copy
	yt.Release()
	out := scoped(y2, "o_proj", a.OProj.Forward)
	y2.Release()
	return out
}

// LlamaMLP is SwiGLU: down_proj(silu(gate_proj(x)) · up_proj(x)), the
// gated product one op (ferry.SwiGLU) that saves its two inputs only.
type LlamaMLP struct {
	GateProj, UpProj, DownProj *Linear
}

func (m *LlamaMLP) Parameters() []*ferry.Tensor { return tensors(m.NamedParameters()) }

func (m *LlamaMLP) NamedParameters() []Named {
	ns := Prefixed("gate_proj", m.GateProj)
	ns = append(ns, Prefixed("up_proj", m.UpProj)...)
	return append(ns, Prefixed("down_proj", m.DownProj)...)
}

func (m *LlamaMLP) Forward(x *ferry.Tensor) *ferry.Tensor {
	g := scoped(x, "gate_proj", m.GateProj.Forward)
	u := scoped(x, "up_proj", m.UpProj.Forward)
	h := ferry.SwiGLU(g, u) // saves g and u, not SiLU(g) as well
	g.Release()
	u.Release()
	out := scoped(h, "down_proj", m.DownProj.Forward)
	h.Release()
	return out
}

// LlamaBlock is a pre-norm decoder layer: x + attn(norm(x)), then
// x + mlp(norm(x)).
type LlamaBlock struct {
	InputNorm *RMSNorm // input_layernorm
	Attn      *LlamaAttention
	PostNorm  *RMSNorm // post_attention_layernorm
	MLP       *LlamaMLP
}

func (b *LlamaBlock) Parameters() []*ferry.Tensor { return tensors(b.NamedParameters()) }

// NamedParameters in Hugging Face's order: self_attn, mlp, then the norms.
func (b *LlamaBlock) NamedParameters() []Named {
	ns := Prefixed("self_attn", b.Attn)
	ns = append(ns, Prefixed("mlp", b.MLP)...)
	ns = append(ns, Prefixed("input_layernorm", b.InputNorm)...)
	return append(ns, Prefixed("post_attention_layernorm", b.PostNorm)...)
}

// Forward maps x [B, T, C] to [B, T, C], making the rotary tables of its
// T positions first (see LlamaAttention.Forward).
func (b *LlamaBlock) Forward(x *ferry.Tensor) *ferry.Tensor {
	cos, sin := b.Attn.tables(x)
	defer cos.Release()
	defer sin.Release()
	return b.ForwardRotary(x, cos, sin)
}

// ForwardRotary maps x [B, T, C] to [B, T, C] with the rotary tables cos
// and sin [T, Embd/Heads] (ferry.RotaryTables).
func (b *LlamaBlock) ForwardRotary(x, cos, sin *ferry.Tensor) *ferry.Tensor {
	h := scoped(x, "input_layernorm", b.InputNorm.Forward)
	a := scoped(h, "self_attn", func(h *ferry.Tensor) *ferry.Tensor { return b.Attn.ForwardRotary(h, cos, sin) })
	h.Release()
	x1 := ferry.Add(x, a)
	a.Release()
	h = scoped(x1, "post_attention_layernorm", b.PostNorm.Forward)
	m := scoped(h, "mlp", b.MLP.Forward)
	h.Release()
	out := ferry.Add(x1, m)
	m.Release()
	x1.Release()
	return out
}

// Llama is the whole model. Forward takes int32 tokens [B, T] (T ≤ Seq)
// and returns logits [B, T, Vocab].
type Llama struct {
	Config      LlamaConfig // with defaults applied
	EmbedTokens *Embedding  // model.embed_tokens
	Layers      []*LlamaBlock
	Norm        *RMSNorm // model.norm
	LMHead      *Linear  // lm_head, untied
	// CheckpointBlocks runs each block as an activation-checkpointed
	// segment (ferry.Tape.Checkpoint): forward keeps only the blocks'
	// inputs, backward recomputes each block, and gradients are unchanged
	// bit for bit. Without it each block is a ferry.Tape.Segment named
	// model.layers.N, recomputed where the tape's SegmentHooks say.
	CheckpointBlocks bool
}

// NewLlama makes a Llama on dev initialised as Hugging Face does
// (initializer_range 0.02): every Linear and the embedding normal with
// std 0.02, the RMSNorms ones. A nil rng draws from cfg.Seed.
func NewLlama(dev device.Device, cfg LlamaConfig, rng *rand.Rand) (*Llama, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(cfg.Seed, 0x11a3a))
	}
	shapes := llamaShapes(cfg)
	w := map[string]*ferry.Tensor{}
	err := ferry.Catch(func() error {
		for _, n := range LlamaParameterNames(cfg) { // a fixed order of draws
			s := shapes[n]
			if len(s) == 1 {
				w[n] = ferry.Ones(dev, s...).SetCategory(device.Parameter)
			} else {
				w[n] = normal(dev, rng, 0.02, s...)
			}
		}
		return nil
	})
	if err != nil {
		for _, t := range w {
			t.Release()
		}
		return nil, err
	}
	return NewLlamaFromWeights(cfg, w)
}

// NewLlamaFromWeights builds a Llama from tensors named as Hugging Face
// names them (LlamaParameterNames). The model takes the tensors over as
// its parameters. Every missing, unexpected or misshapen tensor is
// reported at once.
func NewLlamaFromWeights(cfg LlamaConfig, w map[string]*ferry.Tensor) (*Llama, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	want := llamaShapes(cfg)
	var problems []string
	for _, n := range LlamaParameterNames(cfg) {
		t, ok := w[n]
		switch {
		case !ok:
			problems = append(problems, "missing "+n)
		case !slices.Equal(t.Shape(), want[n]):
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v", n, t.Shape(), want[n]))
		}
	}
	for n := range w {
		if _, ok := want[n]; !ok {
			problems = append(problems, "unexpected "+n)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, fmt.Errorf("nn: Llama weights do not match the config: %v", problems)
	}
	for n, t := range w {
		NewParameter(t, n)
	}
	linear := func(n string) *Linear { return &Linear{Weight: w[n+".weight"]} }
	norm := func(n string) *RMSNorm { return &RMSNorm{Weight: w[n+".weight"], Eps: cfg.NormEps} }
	m := &Llama{Config: cfg, EmbedTokens: &Embedding{w["model.embed_tokens.weight"]},
		Norm: norm("model.norm"), LMHead: linear("lm_head")}
	for i := 0; i < cfg.Layers; i++ {
		h := fmt.Sprintf("model.layers.%d.", i)
		m.Layers = append(m.Layers, &LlamaBlock{
			InputNorm: norm(h + "input_layernorm"),
			Attn: &LlamaAttention{QProj: linear(h + "self_attn.q_proj"), KProj: linear(h + "self_attn.k_proj"),
				VProj: linear(h + "self_attn.v_proj"), OProj: linear(h + "self_attn.o_proj"), Heads: cfg.Heads, KVHeads: cfg.KVHeads, RopeTheta: cfg.RopeTheta},
			PostNorm: norm(h + "post_attention_layernorm"),
			MLP:      &LlamaMLP{GateProj: linear(h + "mlp.gate_proj"), UpProj: linear(h + "mlp.up_proj"), DownProj: linear(h + "mlp.down_proj")},
		})
	}
	return m, nil
}

// Parameters lists every parameter once, in Hugging Face's order.
func (m *Llama) Parameters() []*ferry.Tensor { return tensors(m.NamedParameters()) }

// NamedParameters names the parameters as Hugging Face's LlamaForCausalLM
// does, in its order (LlamaParameterNames).
func (m *Llama) NamedParameters() []Named {
	ns := Prefixed("model.embed_tokens", m.EmbedTokens)
	for i, b := range m.Layers {
		ns = append(ns, Prefixed("model.layers."+moduleName(i), b)...)
	}
	ns = append(ns, Prefixed("model.norm", m.Norm)...)
	return append(ns, Prefixed("lm_head", m.LMHead)...)
}

// SetTraining does nothing: the model has no dropout. (It is here so a
// Llama is a Trainable like the other families.)
func (m *Llama) SetTraining(on bool) {}

// SetStep does nothing: nothing in the model draws from the step.
func (m *Llama) SetStep(step uint64) {}

// Context is the longest sequence the model takes (Config.Seq).
func (m *Llama) Context() int { return m.Config.Seq }

// Vocab is the vocabulary size.
func (m *Llama) Vocab() int { return m.Config.Vocab }

// SetRecompute makes Forward checkpoint every block (CheckpointBlocks).
func (m *Llama) SetRecompute(on bool) { m.CheckpointBlocks = on }

// Forward maps int32 tokens [B, T] to logits [B, T, Vocab]. On a tape,
// modules run in scopes named as Hugging Face names them
// (model.layers.3.self_attn), so saved tensors carry those paths.
func (m *Llama) Forward(tokens *ferry.Tensor) *ferry.Tensor {
	T := tokenLength("llama", tokens, m.Config.Seq)
	tp := tokens.Tape()
	push, pop := scopeFuncs(tp)
	// The rotary tables: constants of no tape, shared by every block; a
	// checkpointed block takes them as inputs, so they live until its
	// recomputation.
	cos, sin := ferry.RotaryTables(tokens.Device(), T, m.Config.Embd/m.Config.Heads, m.Config.RopeTheta)
	defer cos.Release()
	defer sin.Release()
	push("model")
	x := scoped(tokens, "embed_tokens", m.EmbedTokens.Forward)
	x = runBlocks(tp, x, len(m.Layers), "layers.", m.CheckpointBlocks, func(i int, xs ...*ferry.Tensor) *ferry.Tensor {
		return m.Layers[i].ForwardRotary(xs[0], xs[1], xs[2])
	}, cos, sin)
	h := scoped(x, "norm", m.Norm.Forward)
	x.Release()
	pop()
	logits := scoped(h, "lm_head", m.LMHead.Forward)
	h.Release()
	return logits
}

var (
	_ Module         = (*Llama)(nil)
	_ ParameterNamer = (*Llama)(nil)
	_ Trainable      = (*Llama)(nil)
	_ Stepped        = (*Llama)(nil)
	_ Module         = (*LlamaBlock)(nil)
)
