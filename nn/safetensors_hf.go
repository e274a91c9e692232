package nn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"ferry"
	"ferry/internal/fsx"
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

// isHFGPT2Conv1D reports whether name (without "transformer.") is a
// GPT-2 Conv1D weight, h.N.{attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj}.weight,
// which Hugging Face stores transposed.
func isHFGPT2Conv1D(name string) bool {
	rest, ok := inLayer(name, "h.")
	return ok && (rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" ||
		rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight")
}

// isHFGPT2Buffer reports whether name (without "transformer.") is a
// GPT-2 attention-mask buffer, h.N.attn.bias or h.N.attn.masked_bias:
// no parameter, so not loaded.
func isHFGPT2Buffer(name string) bool {
	rest, ok := inLayer(name, "h.")
	return ok && (rest == "attn.bias" || rest == "attn.masked_bias")
}

// isHFLlamaBuffer reports whether name is a Llama's rotary buffer,
// model.layers.N.self_attn.rotary_emb.inv_freq: no parameter.
func isHFLlamaBuffer(name string) bool {
	rest, ok := inLayer(name, "model.layers.")
	return ok && rest == "self_attn.rotary_emb.inv_freq"
}

// inLayer splits a layer's tensor name: name must be prefix, one or
// more decimal digits and a dot; rest is what follows the dot.
func inLayer(name, prefix string) (rest string, ok bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || s[i] != '.' {
		return "", false
	}
	return s[i+1:], true
}

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
			if isHFGPT2Buffer(base) {
				continue
			}
			if isHFGPT2Conv1D(base) && len(st.Shape) == 2 {
				st = transposed(st)
			}
			st.Name = "transformer." + base
		default:
			if isHFLlamaBuffer(st.Name) {
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

// hfConfig holds the fields of a Hugging Face config.json that ferry's
// GPT and Llama read (the others are ignored).
type hfConfig struct {
	ModelType string `json:"model_type"`
	// GPT-2
	NPositions *int     `json:"n_positions"`
	NEmbd      *int     `json:"n_embd"`
	NLayer     *int     `json:"n_layer"`
	NHead      *int     `json:"n_head"`
	LNEps      *float64 `json:"layer_norm_epsilon"`
	// Llama
	MaxPositions  *int            `json:"max_position_embeddings"`
	Hidden        *int            `json:"hidden_size"`
	Intermediate  *int            `json:"intermediate_size"`
	Layers        *int            `json:"num_hidden_layers"`
	Heads         *int            `json:"num_attention_heads"`
	KVHeads       *int            `json:"num_key_value_heads"`
	HeadDim       *int            `json:"head_dim"`
	RopeTheta     *float64        `json:"rope_theta"`
	RMSNormEps    *float64        `json:"rms_norm_eps"`
	HiddenAct     string          `json:"hidden_act"`
	TieEmbeddings *bool           `json:"tie_word_embeddings"`
	RopeScaling   json.RawMessage `json:"rope_scaling"`
	AttentionBias *bool           `json:"attention_bias"`
	MLPBias       *bool           `json:"mlp_bias"`
	Vocab         *int            `json:"vocab_size"`
}

func parseHFConfig(b []byte) (*hfConfig, error) {
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("nn: a Hugging Face config.json: %w", err)
	}
	return &c, nil
}

// HFModelType is the model_type of a Hugging Face config.json ("gpt2",
// "llama", ...).
func HFModelType(configJSON []byte) (string, error) {
	c, err := parseHFConfig(configJSON)
	if err != nil {
		return "", err
	}
	return c.ModelType, nil
}

func need(problems *[]string, name string, v *int) int {
	if v == nil {
		*problems = append(*problems, "no "+name)
		return 0
	}
	return *v
}

// GPTConfigFromHF reads the config.json of a Hugging Face GPT-2
// (model_type "gpt2"): vocab_size, n_positions, n_layer, n_head, n_embd.
// Dropout is left 0 (Hugging Face's resid_pdrop and attn_pdrop are for
// its own training; set Dropout to fine-tune with it); Bias is true.
func GPTConfigFromHF(configJSON []byte) (GPTConfig, error) {
	c, err := parseHFConfig(configJSON)
	if err != nil {
		return GPTConfig{}, err
	}
	var problems []string
	if c.ModelType != "gpt2" {
		problems = append(problems, fmt.Sprintf("model_type %q is not gpt2", c.ModelType))
	}
	if c.LNEps != nil && *c.LNEps != 1e-5 {
		problems = append(problems, fmt.Sprintf("layer_norm_epsilon %v (ferry's GPT uses 1e-5)", *c.LNEps))
	}
	cfg := GPTConfig{Vocab: need(&problems, "vocab_size", c.Vocab), Seq: need(&problems, "n_positions", c.NPositions),
		Layers: need(&problems, "n_layer", c.NLayer), Heads: need(&problems, "n_head", c.NHead),
		Embd: need(&problems, "n_embd", c.NEmbd), Bias: true}
	if len(problems) == 0 {
		if err := cfg.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return GPTConfig{}, fmt.Errorf("nn: not a GPT-2 config ferry can build: %s", strings.Join(problems, "; "))
	}
	return cfg, nil
}

// LlamaConfigFromHF reads the config.json of a Hugging Face Llama
// (model_type "llama"): vocab_size, max_position_embeddings (Seq),
// num_hidden_layers, num_attention_heads, num_key_value_heads (default:
// the heads), hidden_size, intermediate_size, rope_theta (default 10000)
// and rms_norm_eps. What ferry's Llama does not do is an error: tied
// embeddings, rope_scaling, biases, an activation other than silu, a
// head_dim other than hidden_size/num_attention_heads.
func LlamaConfigFromHF(configJSON []byte) (LlamaConfig, error) {
	c, err := parseHFConfig(configJSON)
	if err != nil {
		return LlamaConfig{}, err
	}
	var problems []string
	if c.ModelType != "llama" {
		problems = append(problems, fmt.Sprintf("model_type %q is not llama", c.ModelType))
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		problems = append(problems, fmt.Sprintf("hidden_act %q (ferry's Llama uses silu)", c.HiddenAct))
	}
	if c.TieEmbeddings != nil && *c.TieEmbeddings {
		problems = append(problems, "tie_word_embeddings (ferry's Llama has an untied head)")
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		problems = append(problems, "rope_scaling "+string(c.RopeScaling)+" (not supported)")
	}
	if c.AttentionBias != nil && *c.AttentionBias || c.MLPBias != nil && *c.MLPBias {
		problems = append(problems, "biases (ferry's Llama has none)")
	}
	cfg := LlamaConfig{Vocab: need(&problems, "vocab_size", c.Vocab), Seq: need(&problems, "max_position_embeddings", c.MaxPositions),
		Layers: need(&problems, "num_hidden_layers", c.Layers), Heads: need(&problems, "num_attention_heads", c.Heads),
		Embd: need(&problems, "hidden_size", c.Hidden), Hidden: need(&problems, "intermediate_size", c.Intermediate)}
	cfg.KVHeads = cfg.Heads
	if c.KVHeads != nil {
		cfg.KVHeads = *c.KVHeads
	}
	if c.HeadDim != nil && cfg.Heads > 0 && *c.HeadDim*cfg.Heads != cfg.Embd {
		problems = append(problems, fmt.Sprintf("head_dim %d is not hidden_size/num_attention_heads", *c.HeadDim))
	}
	if c.RopeTheta != nil {
		cfg.RopeTheta = *c.RopeTheta
	}
	if c.RMSNormEps != nil {
		cfg.NormEps = float32(*c.RMSNormEps)
	}
	cfg = cfg.WithDefaults()
	if len(problems) == 0 {
		if err := cfg.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return LlamaConfig{}, fmt.Errorf("nn: not a Llama config ferry can build: %s", strings.Join(problems, "; "))
	}
	return cfg, nil
}

// HFWeightFiles lists the safetensors files of a Hugging Face model
// directory: model.safetensors, or the shards that
// model.safetensors.index.json maps the tensors to (each once, sorted).
// Load them with LoadSafetensorsFiles; read config.json beside them with
// GPTConfigFromHF or LlamaConfigFromHF (HFModelType says which).
func HFWeightFiles(dir string) ([]string, error) {
	files, _, err := HFWeightMap(dir)
	return files, err
}

// HFIndex is a sharded model's model.safetensors.index.json: where it is,
// and which file holds each tensor.
type HFIndex struct {
	Path      string
	WeightMap map[string]string // tensor name → file name beside the index
}

// HFWeightMap is HFWeightFiles with the index the shards come from (nil
// for a single model.safetensors). Given to LoadOptions.Index, the load
// checks every tensor against it.
func HFWeightMap(dir string) ([]string, *HFIndex, error) {
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Lstat(single); err == nil { // whatever it is: its load says what is wrong
		return []string{single}, nil, nil
	}
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	b, err := fsx.ReadLimited(indexPath, 64<<20)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("nn: no model.safetensors or model.safetensors.index.json in %s (a PyTorch .bin checkpoint? ferry reads safetensors)", dir)
		}
		return nil, nil, fmt.Errorf("nn: %w", err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, nil, fmt.Errorf("nn: %s: %w", indexPath, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range index.WeightMap {
		if f == "" || filepath.IsAbs(f) || f != filepath.Base(f) {
			return nil, nil, fmt.Errorf("nn: %s maps a tensor to %q, not a file beside it", indexPath, f)
		}
		if !seen[f] {
			seen[f] = true
			files = append(files, filepath.Join(dir, f))
		}
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("nn: %s maps no tensors", indexPath)
	}
	sort.Strings(files)
	return files, &HFIndex{Path: indexPath, WeightMap: index.WeightMap}, nil
}

// check says where the tensors read (name → the file read from) differ
// from the index: a damaged or stale index, or shards swapped.
func (x *HFIndex) check(from map[string]string) error {
	var bad []string
	names := make([]string, 0, len(from))
	for n := range from {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		want, ok := x.WeightMap[n]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s (in %s) is not listed", n, filepath.Base(from[n])))
		case want != filepath.Base(from[n]):
			bad = append(bad, fmt.Sprintf("%s is listed in %s but is in %s", n, want, filepath.Base(from[n])))
		}
	}
	listed := make([]string, 0, len(x.WeightMap))
	for n := range x.WeightMap {
		if _, ok := from[n]; !ok {
			listed = append(listed, n)
		}
	}
	sort.Strings(listed)
	for _, n := range listed {
		bad = append(bad, fmt.Sprintf("%s is listed in %s, which does not hold it", n, x.WeightMap[n]))
	}
	if len(bad) == 0 {
		return nil
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
	}
	return fmt.Errorf("nn.LoadSafetensors: %s does not match its shards: %s (a damaged or stale index)", x.Path, strings.Join(bad, "; "))
}
