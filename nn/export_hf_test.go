package nn_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/device"
	"ferry/nn"
	"ferry/safetensors"
)

// Weights out (nn.SaveHF), checked against PyTorch: testdata/hfexport/gen.py
// has this test write ferry's export of two models into testdata/hfexport/
// (FERRY_WRITE_HF_EXPORT=1), then loads each directory into a module of
// transformers' structure written in plain PyTorch (GPT2LMHeadModel with
// Conv1D, LlamaForCausalLM), by name with strict=True, and writes its
// logits for fixed tokens into io.safetensors. The models are the weights
// of testdata/hf/gpt2.safetensors and testdata/llama/llama.safetensors.
const exportDir = "../testdata/hfexport/"

// exportModels are the two models ferry exports for the golden data.
func exportModels(t *testing.T, dev device.Device) map[string]nn.Module {
	g := newGPT(t, dev, 3)
	if err := nn.LoadSafetensors(hfDir+"gpt2.safetensors", g); err != nil {
		t.Fatal(err)
	}
	_, wmeta, err := nn.LoadTensors(llamaDir+"llama.safetensors", dev)
	if err != nil {
		t.Fatal(err)
	}
	l, err := nn.NewLlama(dev, llamaGoldenConfig(t, wmeta), rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(l) })
	if err := nn.LoadSafetensors(llamaDir+"llama.safetensors", l); err != nil {
		t.Fatal(err)
	}
	return map[string]nn.Module{"gpt2": g, "llama": l}
}

func TestSaveHFMatchesPyTorch(t *testing.T) {
	dev := cpuDev(t)
	ms := exportModels(t, dev)
	if os.Getenv("FERRY_WRITE_HF_EXPORT") == "1" { // testdata/hfexport/gen.py
		for name, m := range ms {
			d := filepath.Join(exportDir, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := nn.SaveHF(d, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		t.Skip("wrote testdata/hfexport/{gpt2,llama}; now gen.py computes PyTorch's logits")
	}
	ts, _, err := nn.LoadTensors(exportDir+"io.safetensors", dev)
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 testdata/hfexport/gen.py)", err)
	}
	for name, m := range ms {
		t.Run(name, func(t *testing.T) {
			// The export today is byte for byte the directory PyTorch read.
			d := t.TempDir()
			if err := nn.SaveHF(d, m, nil); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"config.json", "model.safetensors"} {
				got, err1 := os.ReadFile(filepath.Join(d, f))
				want, err2 := os.ReadFile(filepath.Join(exportDir, name, f))
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the %s PyTorch read (regenerate with testdata/hfexport/gen.py if the change is meant)", f, filepath.Join(exportDir, name, f))
				}
			}
			// ferry's logits are PyTorch's, read from the export.
			got, want := forward(m, ts[name+".tokens"]), ts[name+".logits"].Float32s()
			var worst float64
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("logits: max |ferry - PyTorch| %.3g", worst)
			if !(worst <= 1e-5) {
				t.Errorf("ferry's logits differ from PyTorch's on the export by %.3g (> 1e-5)", worst)
			}
		})
	}
}

// The export's names, shapes and config are transformers': Conv1D's
// [in, out] for GPT-2's projections, no lm_head.weight (tied), and a
// config that ferry's own Hugging Face reader reads back to the same
// sizes; loading the export gives the weights back bit for bit.
func TestSaveHFLayoutAndRoundTrip(t *testing.T) {
	dev := cpuDev(t)
	ms := exportModels(t, dev)
	d := t.TempDir()
	g := ms["gpt2"].(*nn.GPT)
	if err := nn.SaveHF(d, g, map[string]any{"eos_token_id": 7}); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(d, "model.safetensors"), 0)
	if err != nil {
		t.Fatal(err)
	}
	C := g.Config.Embd
	for name, shape := range map[string][]int{
		"transformer.h.0.attn.c_attn.weight": {C, 3 * C}, "transformer.h.1.mlp.c_fc.weight": {C, 4 * C},
		"transformer.h.1.mlp.c_proj.weight": {4 * C, C}, "transformer.h.0.attn.c_attn.bias": {3 * C},
		"transformer.wte.weight": {g.Config.Vocab, C}, "transformer.wpe.weight": {g.Config.Seq, C},
	} {
		if st := f.Tensor(name); st == nil || !slices.Equal(st.Shape, shape) {
			t.Errorf("%s: %v, want shape %v", name, st, shape)
		}
	}
	if f.Tensor("lm_head.weight") != nil {
		t.Error("lm_head.weight written: save_pretrained writes the tied head once, as transformer.wte.weight")
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v: transformers wants format pt", f.Metadata)
	}
	cfgJSON, err := os.ReadFile(filepath.Join(d, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["eos_token_id"] != 7.0 || cfg["tie_word_embeddings"] != true || cfg["activation_function"] != "gelu_new" {
		t.Errorf("config: %v", cfg)
	}
	back, err := nn.GPTConfigFromHF(cfgJSON)
	if err != nil || back.Vocab != g.Config.Vocab || back.Seq != g.Config.Seq || back.Layers != g.Config.Layers || back.Heads != g.Config.Heads || back.Embd != g.Config.Embd {
		t.Errorf("read back %+v, %v; want %+v", back, err, g.Config)
	}
	g2 := newGPT(t, dev, 99)
	if err := nn.LoadSafetensors(filepath.Join(d, "model.safetensors"), g2); err != nil {
		t.Fatal(err)
	}
	sameBits(t, g, g2)

	l := ms["llama"].(*nn.Llama)
	dl := t.TempDir()
	if err := nn.SaveHF(dl, l, nil); err != nil {
		t.Fatal(err)
	}
	lj, err := os.ReadFile(filepath.Join(dl, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := nn.LlamaConfigFromHF(lj)
	if err != nil || lc != l.Config {
		t.Errorf("read back %+v, %v; want %+v", lc, err, l.Config)
	}
	l2, err := nn.NewLlama(dev, lc, rand.New(rand.NewPCG(5, 5)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l2)
	if err := nn.LoadSafetensors(filepath.Join(dl, "model.safetensors"), l2); err != nil {
		t.Fatal(err)
	}
	sameBits(t, l, l2)

	// No Hugging Face form: refused, nothing written.
	de := t.TempDir()
	if err := nn.SaveHF(de, newMLP(t, dev, 1), nil); err == nil {
		t.Error("an MLP was exported as a Hugging Face model")
	}
	if ents, _ := os.ReadDir(de); len(ents) != 0 {
		t.Errorf("a refused export left %v", ents)
	}
}

func sameBits(t *testing.T, a, b nn.Module) {
	t.Helper()
	pa, pb := nn.NamedParameters(a), nn.NamedParameters(b)
	if len(pa) != len(pb) {
		t.Fatalf("%d parameters, %d", len(pa), len(pb))
	}
	for i := range pa {
		x, y := pa[i].Tensor.Float32s(), pb[i].Tensor.Float32s()
		for j := range x {
			if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
				t.Fatalf("%s[%d]: %v, read back %v", pa[i].Name, j, x[j], y[j])
			}
		}
	}
}
