package nn_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"ferry/nn"
	"ferry/safetensors"
)

// Files named and laid out as Hugging Face writes GPT-2, written by
// testdata/hf/gen.py with PyTorch's logits beside them.
const hfDir = "../testdata/hf/"

func TestLoadHuggingFaceGPT2(t *testing.T) {
	dev := cpuDev(t)
	io := loadIO(t, dev, "../hf/gpt2_io.safetensors")
	for _, c := range []struct {
		file, logits string
		convert      bool
	}{
		{"gpt2.safetensors", "logits", false},             // F32, GPT2Model's names, Conv1D layout, buffers
		{"gpt2_lm_bf16.safetensors", "logits_bf16", true}, // BF16, transformer. prefix, lm_head beside wte
		{"gpt2_f16.safetensors", "logits_f16", true},      // F16, no buffers
	} {
		t.Run(c.file, func(t *testing.T) {
			m := newGPT(t, dev, 11)
			conv, err := nn.DetectConvention(hfDir+c.file, m)
			if err != nil || conv != nn.ConventionHFGPT2 {
				t.Fatalf("convention %q, %v", conv, err)
			}
			if err := nn.LoadSafetensorsWith(hfDir+c.file, m, nn.LoadOptions{ConvertFloats: c.convert}); err != nil {
				t.Fatal(err)
			}
			got, want := forward(m, io["tokens"]), io[c.logits].Float32s()
			var worst, scale float64
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
				scale = math.Max(scale, math.Abs(float64(want[i])))
			}
			t.Logf("logits: max error %.3g (max |logit| %.3g)", worst, scale)
			closeTo(t, "logits of "+c.file, got, want, 1e-5)
			if c.logits != "logits" {
				// The rounded weights compute something else: the test
				// could tell the two apart.
				var d float64
				for i, w := range io["logits"].Float32s() {
					d = math.Max(d, math.Abs(float64(got[i]-w)))
				}
				if d < 1e-4*scale {
					t.Errorf("%s's logits are within %.3g of the float32 weights'; rounding not visible", c.file, d)
				}
			}
		})
	}
}

// nanoGPT's own files are still read as they are, and a file of another
// size is refused, naming the translated names.
func TestHuggingFaceGPT2Conventions(t *testing.T) {
	dev := cpuDev(t)
	m := newGPT(t, dev, 12)
	if conv, err := nn.DetectConvention(stDir+"gpt.safetensors", m); err != nil || conv != nn.ConventionModel {
		t.Errorf("nanoGPT's file: convention %q, %v", conv, err)
	}
	if conv, err := nn.DetectConvention(hfDir+"gpt2.safetensors", newMLP(t, dev, 1)); err != nil || conv != nn.ConventionModel {
		t.Errorf("an MLP reads as %q, %v", conv, err)
	}
	// Without ConvertFloats a BF16 file is refused.
	var le *nn.LoadError
	err := nn.LoadSafetensors(hfDir+"gpt2_lm_bf16.safetensors", m)
	if !errors.As(err, &le) || le.Convention != nn.ConventionHFGPT2 || !strings.Contains(err.Error(), "hf-gpt2") {
		t.Fatalf("BF16 without ConvertFloats: %v", err)
	}
	// A file whose c_attn is not transposed (as nanoGPT would write it,
	// but without the prefix) reads as Hugging Face's and is refused.
	path := rewrite(t, hfDir+"gpt2.safetensors", func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			if ts[i].Name == "h.1.mlp.c_fc.weight" {
				ts[i].Shape = []int{ts[i].Shape[1], ts[i].Shape[0]}
			}
		}
		return ts
	})
	before := snapshot(m)
	err = nn.LoadSafetensors(path, m)
	if !errors.As(err, &le) || len(le.Mismatched) != 1 || !strings.Contains(le.Mismatched[0], "transformer.h.1.mlp.c_fc.weight") {
		t.Errorf("a c_fc in nn.Linear's layout: %v", err)
	}
	after := snapshot(m)
	for n := range before {
		if !slices.Equal(before[n], after[n]) {
			t.Fatalf("a refused file changed %s", n)
		}
	}
}

// The config.json files of gpt2 and TinyLlama-1.1B as Hugging Face
// publishes them (abridged to the fields that matter and a few others).
const (
	hfGPT2Config = `{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
		"embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
		"n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}`
	hfTinyLlamaConfig = `{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu",
		"hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
		"model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
		"rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false,
		"torch_dtype": "bfloat16", "vocab_size": 32000}`
)

func TestConfigsFromHuggingFace(t *testing.T) {
	if typ, err := nn.HFModelType([]byte(hfTinyLlamaConfig)); err != nil || typ != "llama" {
		t.Errorf("model type %q, %v", typ, err)
	}
	g, err := nn.GPTConfigFromHF([]byte(hfGPT2Config))
	if err != nil || g != (nn.GPTConfig{Vocab: 50257, Seq: 1024, Layers: 12, Heads: 12, Embd: 768, Bias: true}) || g.ParameterCount() != 124_439_808 {
		t.Errorf("gpt2: %+v, %v", g, err)
	}
	l, err := nn.LlamaConfigFromHF([]byte(hfTinyLlamaConfig))
	want := nn.LlamaConfig{Vocab: 32000, Seq: 2048, Layers: 22, Heads: 32, KVHeads: 4, Embd: 2048, Hidden: 5632, RopeTheta: 10000, NormEps: 1e-5}
	if err != nil || l != want || l.ParameterCount() != 1_100_048_384 {
		t.Errorf("TinyLlama: %+v, %v", l, err)
	}
	for _, c := range []struct{ json, want string }{
		{strings.Replace(hfTinyLlamaConfig, `"tie_word_embeddings": false`, `"tie_word_embeddings": true`, 1), "tie_word_embeddings"},
		{strings.Replace(hfTinyLlamaConfig, `"rope_scaling": null`, `"rope_scaling": {"type": "linear", "factor": 2.0}`, 1), "rope_scaling"},
		{strings.Replace(hfTinyLlamaConfig, `"num_key_value_heads": 4`, `"num_key_value_heads": 5`, 1), "key/value heads"},
		{strings.Replace(hfTinyLlamaConfig, `"hidden_size": 2048,`, ``, 1), "no hidden_size"},
		{hfGPT2Config, `model_type "gpt2" is not llama`},
		{`{`, "config.json"},
	} {
		if _, err := nn.LlamaConfigFromHF([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error saying %q, got %v", c.want, err)
		}
	}
	if _, err := nn.GPTConfigFromHF([]byte(strings.Replace(hfGPT2Config, `"n_head": 12`, `"n_head": 7`, 1))); err == nil {
		t.Error("12 heads of 768/7 accepted")
	}
}

// Older Hugging Face Llama files carry a rotary_emb.inv_freq buffer per
// layer; the Llama loads them, skipping the buffers, in bfloat16 too.
func TestLoadLlamaWithBuffersAndBF16(t *testing.T) {
	dev := cpuDev(t)
	path := rewrite(t, "../testdata/llama/llama.safetensors", func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i, x := range ts {
			v, _ := x.Float32s()
			d := make([]byte, 2*len(v))
			for k, f := range v {
				b := math.Float32bits(f) + 0x8000 // round half up to bfloat16
				d[2*k], d[2*k+1] = byte(b>>16), byte(b>>24)
			}
			ts[i] = safetensors.Tensor{Name: x.Name, DType: safetensors.BF16, Shape: x.Shape, Data: d}
		}
		for _, l := range []string{"0", "1"} {
			ts = append(ts, safetensors.FromFloat32s("model.layers."+l+".self_attn.rotary_emb.inv_freq", []float32{1, 0.1, 0.01, 0.001}, 4))
		}
		return ts
	})
	m, err := nn.NewLlama(dev, nn.LlamaConfig{Vocab: 64, Seq: 16, Layers: 2, Heads: 4, KVHeads: 2, Embd: 32, Hidden: 48, NormEps: 1e-5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	if err := nn.LoadSafetensorsWith(path, m, nn.LoadOptions{ConvertFloats: true}); err != nil {
		t.Fatal(err)
	}
	ref, _, err := nn.LoadTensors("../testdata/llama/llama.safetensors", dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nn.NamedParameters(m) {
		got, want := n.Tensor.Float32s(), ref[n.Name].Float32s()
		ref[n.Name].Release()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > math.Abs(float64(want[i]))/256 {
				t.Fatalf("%s[%d] = %v, PyTorch's float32 %v: not its bfloat16 rounding", n.Name, i, got[i], want[i])
			}
		}
	}
}

// A sharded checkpoint (two files and model.safetensors.index.json, as
// Hugging Face writes large models) loads as the single file does.
func TestLoadShardedLlama(t *testing.T) {
	dev := cpuDev(t)
	f, err := safetensors.ReadFile("../testdata/llama/llama.safetensors", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	shards := [2][]safetensors.Tensor{}
	index := map[string]string{}
	for i, x := range f.Tensors {
		shards[i%2] = append(shards[i%2], x)
		index[x.Name] = fmt.Sprintf("model-%05d-of-00002.safetensors", i%2+1)
	}
	for i, s := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)), s, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": index})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644)
	files, err := nn.HFWeightFiles(dir)
	if err != nil || len(files) != 2 {
		t.Fatalf("files %v, %v", files, err)
	}
	cfg := nn.LlamaConfig{Vocab: 64, Seq: 16, Layers: 2, Heads: 4, KVHeads: 2, Embd: 32, Hidden: 48, NormEps: 1e-5}
	load := func(f func(m nn.Module) error) map[string][]float32 {
		m, err := nn.NewLlama(dev, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nn.Release(m)
		if err := f(m); err != nil {
			t.Fatal(err)
		}
		return snapshot(m)
	}
	one := load(func(m nn.Module) error { return nn.LoadSafetensors("../testdata/llama/llama.safetensors", m) })
	two := load(func(m nn.Module) error { return nn.LoadSafetensorsFiles(files, m, nn.LoadOptions{}) })
	if !reflect.DeepEqual(one, two) {
		t.Error("the sharded checkpoint loads other values")
	}
	m, _ := nn.NewLlama(dev, cfg, nil)
	defer nn.Release(m)
	if err := nn.LoadSafetensorsFiles([]string{files[0], files[0]}, m, nn.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "in both") {
		t.Errorf("a shard given twice: %v", err)
	}
	if _, err := nn.HFWeightFiles(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("an empty directory: %v", err)
	}
}
