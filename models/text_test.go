package models_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry/data/text"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/models"
)

func tinyGPT(t *testing.T, vocab int) (models.LanguageFamily, models.Sizes) {
	f, err := models.Lookup("gpt")
	if err != nil {
		t.Fatal(err)
	}
	s := models.Defaults(f, "cpu")
	for k, v := range map[string]float64{"layers": 1, "heads": 2, "embd": 16, "seq": 8, "batch": 3, "vocab": float64(vocab), "dropout": 0} {
		s[k] = v
	}
	return f.(models.LanguageFamily), s
}

// A TextTask on token ids draws its windows from the ids (every input and
// target a training id, each target the id after its input), validation
// from the held-out ids, and a second task of the same seed draws the same
// validation loss; a vocabulary below the tokenizer's is refused.
func TestTokenTaskBatchesIDs(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	txt := &text.Text{Train: make([]byte, 1000), Val: make([]byte, 200), Source: "test"}
	tok := &models.Tokens{Name: "bpe", Vocab: 1000}
	for i := range 400 {
		tok.Train = append(tok.Train, int32(500+i))
	}
	for i := range 40 {
		tok.Val = append(tok.Val, int32(i))
	}
	f, s := tinyGPT(t, 1000)
	task, err := models.NewTokenTask(dev, txt, tok, f, s, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer task.Release()
	if task.Tokenizer() != "bpe" || task.Identity()["tokenizer"] != "bpe" {
		t.Fatalf("tokenizer %q, identity %v", task.Tokenizer(), task.Identity())
	}
	x, y, items, err := task.Batch(3, 0)
	if err != nil || items != 24 {
		t.Fatalf("items %d, %v", items, err)
	}
	xs, ys := x.Int32s(), y.Int32s()
	for i := range xs {
		if xs[i] < 500 || xs[i] >= 900 || ys[i] != xs[i]+1 {
			t.Fatalf("window %d: %d → %d, not consecutive training ids", i, xs[i], ys[i])
		}
	}
	m1, err := task.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	again, err := models.NewTokenTask(dev, txt, tok, f, s, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	m2, _ := again.Evaluate()
	if m1[0].Value != m2[0].Value {
		t.Errorf("validation %v, then %v", m1[0].Value, m2[0].Value)
	}
	_, small := tinyGPT(t, 256)
	if _, err := models.NewTokenTask(dev, txt, tok, f, small, 2, 7); err == nil {
		t.Error("vocabulary 256 for a tokenizer of 1000: no error")
	}
}

// The byte-level task's batches are text.Batch's over the bytes, as
// before token ids existed.
func TestByteTaskBatchesBytes(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	train := make([]byte, 500)
	for i := range train {
		train[i] = byte(i * 7)
	}
	txt := &text.Text{Train: train, Val: train[:100], Source: "test"}
	f, s := tinyGPT(t, 256)
	task, err := models.NewTextTask(dev, txt, f, s, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer task.Release()
	x, y, _, _ := task.Batch(5, 1)
	defer x.Release()
	defer y.Release()
	rng := rand.New(rand.NewPCG(3^0x7465787462617463, 5<<16|1))
	want, _ := text.Windows(train, rng, 3, 8)
	if !slices.Equal(x.Int32s(), want) || task.Tokenizer() != "byte" {
		t.Errorf("batch %v, want %v", x.Int32s(), want)
	}
}

// Temperature 0 is the argmax, whatever k and the generator.
func TestPickTokenGreedy(t *testing.T) {
	logits := []float32{0.1, 3, -1, 2.9}
	for i := range 20 {
		if got := models.PickToken(logits, 0, 1+i%4, rand.New(rand.NewPCG(uint64(i), 1))); got != 1 {
			t.Fatalf("greedy picked %d", got)
		}
	}
	seen := map[int]bool{}
	for i := range 200 {
		seen[models.PickToken(logits, 5, 4, rand.New(rand.NewPCG(uint64(i), 1)))] = true
	}
	if len(seen) < 3 {
		t.Errorf("temperature 5 drew only %v", seen)
	}
}

// The validation of N ranks at batch B is one process's at N·B: rank r
// holds rows [r·B, (r+1)·B) of each batch that process draws, so the
// mean of the ranks' losses is its loss (float32 rounding apart). Each
// rank holds only its rows, and Evaluate afterwards is one process's
// again.
func TestTextValidationShards(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	txt := &text.Text{Train: make([]byte, 2000), Val: make([]byte, 600), Source: "test"}
	for _, b := range [][]byte{txt.Train, txt.Val} {
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
	}
	f, s := tinyGPT(t, 256)
	const ranks, rows = 3, 2
	s["batch"] = ranks * rows
	whole, err := models.NewTextTask(dev, txt, f, s, 4, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Release()
	want, err := whole.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	s["batch"] = rows
	part, err := models.NewTextTask(dev, txt, f, s, 4, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer part.Release()
	alone, _ := part.Evaluate()
	var sum, count float64
	for r := range ranks {
		ms, err := part.EvaluateShard(r, ranks)
		if err != nil {
			t.Fatal(err)
		}
		if ms[0].Name != "val_loss" || ms[0].Count != 4 {
			t.Fatalf("rank %d: %+v", r, ms)
		}
		sum, count = sum+ms[0].Sum, count+ms[0].Count
	}
	got := sum / count
	t.Logf("%d ranks × batch %d: %.7f; one process at batch %d: %.7f; at batch %d: %.7f", ranks, rows, got, ranks*rows, want[0].Value, rows, alone[0].Value)
	if math.Abs(got-want[0].Value) > 1e-6 || got == alone[0].Value {
		t.Errorf("the ranks' validation %.7f is not one process's at the whole batch, %.7f", got, want[0].Value)
	}
	if again, _ := part.Evaluate(); again[0].Value != alone[0].Value {
		t.Errorf("Evaluate after the shards: %v, before %v", again[0].Value, alone[0].Value)
	}
	if _, err := part.EvaluateShard(3, 3); err == nil {
		t.Error("rank 3 of 3: no error")
	}
}

// The validation batches wait in host memory: a task holds the same
// device memory with 1 or 16 of them, and an evaluation leaves the
// device as it found it (each batch goes there for its own forward only).
func TestTextValidationBatchesStayOffTheDevice(t *testing.T) {
	txt := &text.Text{Train: make([]byte, 1000), Val: make([]byte, 300), Source: "test"}
	for i := range txt.Val {
		txt.Val[i] = byte('a' + i%26)
	}
	f, s := tinyGPT(t, 256)
	var held []int64
	for _, batches := range []int{1, 16} {
		dev, err := cpu.New(device.Options{})
		if err != nil {
			t.Fatal(err)
		}
		task, err := models.NewTextTask(dev, txt, f, s, batches, 5)
		if err != nil {
			t.Fatal(err)
		}
		before := dev.Allocator().Allocated()
		if _, err := task.Evaluate(); err != nil {
			t.Fatal(err)
		}
		if after := dev.Allocator().Allocated(); after != before {
			t.Errorf("%d validation batches: %d bytes on the device before an evaluation, %d after", batches, before, after)
		}
		held = append(held, before)
		task.Release()
		dev.Close()
	}
	if held[0] != held[1] {
		t.Errorf("the device holds %d bytes with 1 validation batch, %d with 16", held[0], held[1])
	}
}
