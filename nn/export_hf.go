package nn

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ferry"
	"ferry/internal/fsx"
	"ferry/safetensors"
)

// Weights out: a model written as Hugging Face's transformers writes it
// (save_pretrained), so that from_pretrained reads a ferry run. It is the
// inverse of what LoadSafetensors does with Hugging Face's files:
//
//   - A GPT becomes a GPT2LMHeadModel: the same names as nanoGPT's
//     (transformer.h.N.attn.c_attn.weight, ...), the four projections of
//     each block transposed to Conv1D's [in, out], and no lm_head.weight:
//     the head is tied to transformer.wte.weight, and save_pretrained
//     writes a tied tensor once (tie_word_embeddings is true). No causal
//     mask buffers: transformers builds them.
//   - A Llama becomes a LlamaForCausalLM: ferry's names are Hugging
//     Face's, and its rotary embeddings rotate the same pairs (the
//     "rotate_half" convention, ferry.RotaryEmbedding), so q_proj and
//     k_proj are written as they are, with no permutation.
//
// The weights are written as float32 (torch_dtype "float32").

// HFConfig is the config.json of Hugging Face's model for m: GPT2LMHeadModel
// for a *GPT (with biases: GPT-2 has them), LlamaForCausalLM for a
// *Llama. The caller may add fields (bos_token_id, ...) before writing it.
func HFConfig(m Module) (map[string]any, error) {
	switch g := m.(type) {
	case *GPT:
		c := g.Config
		if !c.Bias {
			return nil, fmt.Errorf("nn.HFConfig: a GPT without biases has no Hugging Face GPT-2 form (GPT-2's Conv1D and LayerNorm have biases)")
		}
		drop := json.Number(strconv.FormatFloat(float64(c.Dropout), 'g', -1, 32))
		return map[string]any{
			"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2",
			"vocab_size": c.Vocab, "n_positions": c.Seq, "n_ctx": c.Seq, "n_embd": c.Embd, "n_layer": c.Layers, "n_head": c.Heads,
			"n_inner": nil, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
			"resid_pdrop": drop, "embd_pdrop": drop, "attn_pdrop": drop,
			"scale_attn_weights": true, "tie_word_embeddings": true, "use_cache": true, "torch_dtype": "float32",
		}, nil
	case *Llama:
		c := g.Config.WithDefaults()
		return map[string]any{
			"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
			"vocab_size": c.Vocab, "max_position_embeddings": c.Seq, "hidden_size": c.Embd, "intermediate_size": c.Hidden,
			"num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
			"head_dim": c.Embd / c.Heads, "hidden_act": "silu", "rope_theta": c.RopeTheta, "rope_scaling": nil,
			// The float32 eps as its shortest decimal (1e-06, not 9.99999997e-07),
			// which LlamaConfigFromHF reads back to the same float32.
			"rms_norm_eps":   json.Number(strconv.FormatFloat(float64(c.NormEps), 'g', -1, 32)),
			"attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false, "initializer_range": 0.02,
			"pretraining_tp": 1, "use_cache": true, "torch_dtype": "float32",
		}, nil
	}
	return nil, fmt.Errorf("nn.HFConfig: %T has no Hugging Face form (ferry writes its GPT and Llama)", m)
}

// HFTensors returns m's parameters (a *GPT or *Llama) named and laid out
// as Hugging Face's save_pretrained writes them (see HFConfig), as float32
// safetensors tensors sorted by name. m's parameters must hold values.
func HFTensors(m Module) ([]safetensors.Tensor, error) {
	if _, err := HFConfig(m); err != nil {
		return nil, err
	}
	_, gpt := m.(*GPT)
	var out []safetensors.Tensor
	err := ferry.Catch(func() error {
		for _, p := range NamedParameters(m) {
			st := safetensors.FromFloat32s(p.Name, p.Tensor.Float32s(), p.Tensor.Shape()...)
			if gpt && isHFGPT2Conv1D(strings.TrimPrefix(p.Name, "transformer.")) {
				st = transposed(st) // nn.Linear's [out, in] to Conv1D's [in, out]
			}
			out = append(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("nn.HFTensors: %w", err)
	}
	return out, nil
}

// SaveHF writes m as a Hugging Face model into dir, which must exist:
// config.json (HFConfig, with extra's fields added over it) and
// model.safetensors (HFTensors, __metadata__ {"format": "pt"}), each
// replaced atomically. A caller that wants the directory to appear whole
// or not at all writes into a temporary directory and renames it (as
// ferry export does).
func SaveHF(dir string, m Module, extra map[string]any) error {
	cfg, err := HFConfig(m)
	if err != nil {
		return err
	}
	for k, v := range extra {
		cfg[k] = v
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("nn.SaveHF: %s is not a directory", dir)
	}
	ts, err := HFTensors(m)
	if err != nil {
		return err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("nn.SaveHF: %w", err)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("nn.SaveHF: config.json: %w", err)
	}
	if err := fsx.WriteAtomic(filepath.Join(dir, "config.json"), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return fmt.Errorf("nn.SaveHF: %w", err)
	}
	return nil
}
