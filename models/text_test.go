package models_test

import (
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
