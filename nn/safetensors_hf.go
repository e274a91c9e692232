package nn

import (
	"fmt"
	"regexp"
	"strings"

	"ferry"
	"ferry/safetensors"
)

// Names that travel: files named and laid out as Hugging Face's
// transformers writes them load into ferry's models.
//
// ferry's GPT is named as nanoGPT names it (transformer.h.0.attn.c_attn.
// weight, an nn.Linear: [out, in]). Hugging Face's GPT2Model and
// GPT2LMHeadModel name the same tensors h.0.attn.c_attn.weight (with a
// transformer. prefix in GPT2LMHeadModel's files) and keep the four
// projections of each block as Conv1D modules, whose weight is stored
// transposed, [in, out]. Their files also carry the causal-mask buffers
// h.N.attn.bias and h.N.attn.masked_bias, which ferry does not need.
//
// ferry's Llama is named as Hugging Face names LlamaForCausalLM, so its
// files load as they are; older ones carry a buffer per layer,
// model.layers.N.self_attn.rotary_emb.inv_freq, which is skipped.

// Convention is how a file names and lays out a model's tensors.
type Convention string

const (
	// ConventionModel: the file uses the model's own names and layouts
	// (NamedParameters): nanoGPT's for a GPT, Hugging Face's for a Llama.
	ConventionModel Convention = "model"
	// ConventionHFGPT2: Hugging Face's GPT-2 (h.N..., Conv1D weights
	// transposed, with or without the transformer. prefix), loaded into
	// a GPT.
	ConventionHFGPT2 Convention = "hf-gpt2"
)

var (
	hfGPT2Conv1D  = regexp.MustCompile(`^h\.[0-9]+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$`)
	hfGPT2Buffer  = regexp.MustCompile(`^h\.[0-9]+\.attn\.(bias|masked_bias)$`)
	hfLlamaBuffer = regexp.MustCompile(`^model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq$`)
)

// DetectConvention says how the safetensors file at path names the
// tensors of m (see ConventionHFGPT2). LoadSafetensors detects it
// itself; this is for a caller that wants to say what it loads.
func DetectConvention(path string, m Module) (Convention, error) {
	f, err := safetensors.ReadFile(path, 0)
	if err != nil {
		return "", fmt.Errorf("nn.DetectConvention: %w", err)
	}
	return detectConvention(f, modelTensors(m)), nil
}

func modelTensors(m Module) map[string]*ferry.Tensor {
	out := map[string]*ferry.Tensor{}
	for _, n := range NamedParameters(m) {
		out[n.Name] = n.Tensor
	}
	return out
}

// detectConvention: a GPT (the model has transformer.h.0.attn.c_attn.
// weight, [3C, C]) reads a file as Hugging Face's GPT-2 when the file has
// h.0.attn.c_attn.weight (no prefix: nanoGPT always has one), or
// transformer.h.0.attn.c_attn.weight transposed, [C, 3C].
func detectConvention(f *safetensors.File, model map[string]*ferry.Tensor) Convention {
	w := model["transformer.h.0.attn.c_attn.weight"]
	if w == nil || w.Rank() != 2 {
		return ConventionModel
	}
	if f.Tensor("h.0.attn.c_attn.weight") != nil || f.Tensor("wte.weight") != nil {
		return ConventionHFGPT2
	}
	if st := f.Tensor("transformer.h.0.attn.c_attn.weight"); st != nil && len(st.Shape) == 2 &&
		st.Shape[0] == w.Dim(1) && st.Shape[1] == w.Dim(0) && w.Dim(0) != w.Dim(1) {
		return ConventionHFGPT2
	}
	return ConventionModel
}

// translate returns f's tensors renamed and laid out as the model names
// them under convention c, without the buffers the model does not hold.
// A transposed tensor gets new data; the others share f's.
func translate(f *safetensors.File, c Convention) []safetensors.Tensor {
	out := make([]safetensors.Tensor, 0, len(f.Tensors))
	for _, st := range f.Tensors {
		switch c {
		case ConventionHFGPT2:
			if st.Name == "lm_head.weight" { // the tied head: TiedAliases
				out = append(out, st)
				continue
			}
			base := strings.TrimPrefix(st.Name, "transformer.")
			if hfGPT2Buffer.MatchString(base) {
				continue
			}
			if hfGPT2Conv1D.MatchString(base) && len(st.Shape) == 2 {
				st = transposed(st)
			}
			st.Name = "transformer." + base
		default:
			if hfLlamaBuffer.MatchString(st.Name) {
				continue
			}
		}
		out = append(out, st)
	}
	return out
}

// transposed returns a 2-D tensor's transpose (any element size); data
// that does not fit the shape is left for the loader to report.
func transposed(st safetensors.Tensor) safetensors.Tensor {
	r, c, e := st.Shape[0], st.Shape[1], st.DType.Size()
	if e == 0 || r < 0 || c < 0 || len(st.Data) != r*c*e {
		return st
	}
	d := make([]byte, len(st.Data))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			copy(d[(j*r+i)*e:(j*r+i+1)*e], st.Data[(i*c+j)*e:(i*c+j+1)*e])
		}
	}
	st.Shape, st.Data = []int{c, r}, d
	return st
}
