package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/data/hftok"
	"ferry/device"
	"ferry/nn"
	"ferry/train"
)

// A Llama directory with its own tokenizer.json (Llama 3's kind: a
// byte-level BPE with Llama 3's split pattern, trained by
// testdata/hftok/gen.py) trains, evaluates and samples on that
// tokenizer's ids; the checkpoint records it by name and file; the export
// carries the same file; and a changed file is refused, not used.
func TestLlamaTrainsWithItsTokenizer(t *testing.T) {
	tokFile := "../../testdata/hftok/llama3style.tokenizer.json"
	tokBytes, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := hftok.Parse(tokBytes)
	if err != nil {
		t.Fatal(err)
	}
	src := hfSource(t, func(dev device.Device) nn.Module {
		m, err := nn.NewLlama(dev, nn.LlamaConfig{Vocab: 672, Seq: 32, Layers: 1, Heads: 2, KVHeads: 1, Embd: 16, Hidden: 32}.WithDefaults(), rand.New(rand.NewPCG(4, 4)))
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
	if err := os.WriteFile(filepath.Join(src, "tokenizer.json"), tokBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "run")
	res := runJSON(t, "train", "text", "--init-from", src, "--data", data, "--seq", "16", "--batch", "2", "--val-batches", "1",
		"--steps", "2", "--checkpoint-dir", ck, "--sample", "20", "--prompt", "func main")
	want := "hf:" + ref.SHA256()[:16]
	if res["tokenizer"] != want {
		t.Errorf("the run's tokenizer %v, want %s", res["tokenizer"], want)
	}
	if s, _ := res["sample"].(string); !strings.HasPrefix(s, "func main") {
		t.Errorf("the sample %q does not continue the prompt", s)
	}
	_, meta, err := train.ResolveCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Identity["tokenizer"] != want || meta.Identity["tokenizer_file"] != filepath.Join(src, "tokenizer.json") {
		t.Errorf("the checkpoint records tokenizer %v from %v", meta.Identity["tokenizer"], meta.Identity["tokenizer_file"])
	}
	// The text's tokens, not its bytes: the corpus's ids under the
	// tokenizer are fewer than its bytes.
	txt, err := loadText(context.Background(), data, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ref.Encode(txt.Train)); !(n < len(txt.Train)*2/3) {
		t.Errorf("%d ids for %d bytes: is the tokenizer merging?", n, len(txt.Train))
	}

	ev := runJSON(t, "eval", "--checkpoint-dir", ck)
	if ev["tokenizer"] != want || ev["unit"] != "token" {
		t.Errorf("eval: %v", ev)
	}
	sm := runJSON(t, "sample", "--checkpoint-dir", ck, "--n", "10", "--prompt", "return")
	if s, _ := sm["text"].(string); !strings.HasPrefix(s, "return") || sm["tokenizer"] != want {
		t.Errorf("sample: %v", sm)
	}

	out := filepath.Join(t.TempDir(), "hf")
	ex := runJSON(t, "export", "--checkpoint-dir", ck, "--out", out)
	if ex["tokenizer"] != want {
		t.Errorf("export: %v", ex)
	}
	got, err := os.ReadFile(filepath.Join(out, "tokenizer.json"))
	if err != nil || !bytes.Equal(got, tokBytes) {
		t.Errorf("the export's tokenizer.json is not the source's (%v)", err)
	}
	var tc map[string]any
	if b, err := os.ReadFile(filepath.Join(out, "tokenizer_config.json")); err != nil || json.Unmarshal(b, &tc) != nil || tc["tokenizer_class"] != "PreTrainedTokenizerFast" {
		t.Errorf("tokenizer_config.json: %v, %v", tc, err)
	}

	// A tokenizer.json changed since the run: eval refuses it.
	if err := os.WriteFile(filepath.Join(src, "tokenizer.json"), append(tokBytes, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "eval", "--checkpoint-dir", ck)
	if code != 1 || !strings.Contains(errOut, "not the "+want+" the run trained with") {
		t.Errorf("a changed tokenizer.json: exit %d, %s", code, errOut)
	}
}

// A run on GPT-2's BPE exports GPT-2's tokenizer.json, which encodes as
// GPT-2 does.
func TestExportWritesGPT2Tokenizer(t *testing.T) {
	if testing.Short() {
		t.Skip("a 50257-token model")
	}
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "run")
	runJSON(t, "train", "text", "--data", data, "--tokenizer", "bpe", "--token-cache", t.TempDir(), "--layers", "1", "--heads", "2",
		"--embd", "16", "--seq", "16", "--batch", "2", "--val-batches", "1", "--steps", "1", "--sample", "0", "--checkpoint-dir", ck)
	out := filepath.Join(t.TempDir(), "hf")
	ex := runJSON(t, "export", "--checkpoint-dir", ck, "--out", out)
	if ex["tokenizer"] != "bpe" {
		t.Fatalf("export: %v", ex)
	}
	tok, err := hftok.Load(filepath.Join(out, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode([]byte("Hello world")); !slices.Equal(got, []int32{15496, 995}) {
		t.Errorf("Hello world: %v, GPT-2 gives [15496 995]", got)
	}
	var cfg map[string]any
	if b, err := os.ReadFile(filepath.Join(out, "config.json")); err != nil || json.Unmarshal(b, &cfg) != nil || cfg["eos_token_id"] != 50256.0 {
		t.Errorf("config.json: %v %v", cfg["eos_token_id"], err)
	}
}
