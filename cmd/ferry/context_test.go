package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/models"
	"ferry/nn"
)

// hfSource writes a Hugging Face directory of a model with vocabulary
// 256 (bytes) built by build, and returns it.
func hfSource(t *testing.T, build func(dev device.Device) nn.Module) string {
	t.Helper()
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := build(dev)
	defer nn.Release(m)
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := nn.SaveHF(dir, m, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func hfGPT(t *testing.T, seq int) string {
	return hfSource(t, func(dev device.Device) nn.Module {
		g, err := nn.NewGPT(dev, nn.GPTConfig{Vocab: 256, Seq: seq, Layers: 2, Heads: 2, Embd: 32, Bias: true}, rand.New(rand.NewPCG(4, 4)))
		if err != nil {
			t.Fatal(err)
		}
		return g
	})
}

// Fine-tuning a GPT-2-shaped Hugging Face model (n_positions 64) at
// --seq 32 crops its position table, as nanoGPT's crop_block_size does:
// the run's validation before its first step is the source's own loss at
// context 32 on the same batches, computed by the uncropped model; and
// the run then trains. --seq above 64 is refused with the reason.
func TestFineTuneGPTAtShorterContext(t *testing.T) {
	data := corpus(t)
	src := hfGPT(t, 64)
	res := runJSON(t, "train", "text", "--init-from", src, "--data", data, "--seq", "32", "--batch", "4", "--val-batches", "2",
		"--steps", "2", "--eval-every", "2", "--sample", "0")
	initial, final := num(t, res, "initial_val_loss"), num(t, res, "final_val_loss")

	// The source's loss at context 32, by the 64-position model, on the
	// validation batches such a run draws (seed 1, 2 batches of 4 × 32).
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	txt, err := loadText(context.Background(), data, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	s, err := models.OpenSource(src)
	if err != nil {
		t.Fatal(err)
	}
	sz := models.Sizes{"batch": 4}
	for k, v := range s.Sizes {
		sz[k] = v
	}
	full, err := s.Family.LanguageModel(dev, sz, 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(full); err != nil {
		t.Fatal(err)
	}
	if full.Context() != 64 {
		t.Fatalf("the source's model has context %d", full.Context())
	}
	sz["seq"] = 32
	task, err := models.NewTokenTask(dev, txt, nil, s.Family, sz, 2, 1) // the run's batches: its seed is 1
	if err != nil {
		t.Fatal(err)
	}
	nn.Release(task.LM)
	task.LM = full // evaluates at the batches' length, 32, with all 64 rows of wpe
	nn.SetTraining(full, false)
	defer task.Release()
	ms, err := task.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Value != initial {
		t.Errorf("the run's step-0 validation %v, the source's loss at context 32 %v: they must be equal", initial, ms[0].Value)
	}
	if !(final < initial) {
		t.Errorf("val loss %v → %v: the cropped model did not train", initial, final)
	}

	// The human output says what happened to the table.
	out, errOut, code := runCLI(t, "train", "text", "--init-from", src, "--data", data, "--seq", "32", "--batch", "2", "--val-batches", "1",
		"--steps", "1", "--sample", "0")
	if code != 0 || !strings.Contains(out, "position table is cropped to the first 32 rows") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
	// Longer than the table: refused, with the reason.
	_, errOut, code = runCLI(t, "train", "text", "--init-from", src, "--data", data, "--seq", "128", "--steps", "1", "--sample", "0")
	if code != 1 || !strings.Contains(errOut, "rows past 64 do not exist") || !strings.Contains(errOut, "--seq 64 or less") {
		t.Errorf("--seq 128 on a 64-position GPT: exit %d, %s", code, errOut)
	}
}

// A Llama (rotary embeddings, no position table) fine-tunes at a shorter
// context and at a longer one, and says which.
func TestFineTuneLlamaAtAnyContext(t *testing.T) {
	data := corpus(t)
	src := hfSource(t, func(dev device.Device) nn.Module {
		m, err := nn.NewLlama(dev, nn.LlamaConfig{Vocab: 256, Seq: 32, Layers: 1, Heads: 2, KVHeads: 1, Embd: 16, Hidden: 32}.WithDefaults(), rand.New(rand.NewPCG(4, 4)))
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
	for seq, want := range map[string]string{"16": "simply runs shorter", "64": "has learned none past 32"} {
		out, errOut, code := runCLI(t, "train", "text", "--init-from", src, "--data", data, "--seq", seq, "--batch", "2", "--val-batches", "1",
			"--steps", "1", "--sample", "0")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--seq %s: exit %d: %s%s", seq, code, out, errOut)
		}
	}
}
