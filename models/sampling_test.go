package models_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry/models"
)

// logitsOf are logits whose softmax at temperature 1 is p.
func logitsOf(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, v := range p {
		l[i] = float32(math.Log(v))
	}
	return l
}

// draws counts n picks by s.
func draws(s models.Sampling, logits []float32, n int) map[int]int {
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[int]int{}
	for range n {
		seen[s.Pick(logits, rng)]++
	}
	return seen
}

// Top-p keeps the smallest set of the likeliest tokens whose
// probability reaches p, draws among them in proportion to their
// probabilities, and applies after top-k (over the top k's renormalised
// probabilities), as Hugging Face's generate does.
func TestSamplingTopP(t *testing.T) {
	logits := logitsOf(0.05, 0.5, 0.15, 0.3) // ids by probability: 1, 3, 2, 0
	const n = 20000
	for _, c := range []struct {
		s    models.Sampling
		want map[int]float64 // id → share of the draws
	}{
		{models.Sampling{Temperature: 1, TopK: 4, TopP: 0.75}, map[int]float64{1: 0.5 / 0.8, 3: 0.3 / 0.8}},
		{models.Sampling{Temperature: 1, TopK: 4, TopP: 0.85}, map[int]float64{1: 0.5 / 0.95, 3: 0.3 / 0.95, 2: 0.15 / 0.95}},
		{models.Sampling{Temperature: 1, TopK: 4, TopP: 0.4}, map[int]float64{1: 1}},
		{models.Sampling{Temperature: 1, TopK: 4, TopP: 0.6}, map[int]float64{1: 0.5 / 0.8, 3: 0.3 / 0.8}},
		// After top-k 2, id 1 holds 0.5/0.8 = 0.625 ≥ 0.6 alone.
		{models.Sampling{Temperature: 1, TopK: 2, TopP: 0.6}, map[int]float64{1: 1}},
		{models.Sampling{Temperature: 1, TopK: 4, TopP: 1}, map[int]float64{1: 0.5, 3: 0.3, 2: 0.15, 0: 0.05}},
	} {
		seen := draws(c.s, logits, n)
		if len(seen) != len(c.want) {
			t.Errorf("%+v: drew ids %v, want exactly %v", c.s, seen, c.want)
			continue
		}
		for id, share := range c.want {
			got := float64(seen[id]) / n
			if math.Abs(got-share) > 4*math.Sqrt(share*(1-share)/n)+1e-9 {
				t.Errorf("%+v: id %d drawn %.4f of the time, want %.4f", c.s, id, got, share)
			}
		}
	}
}

// Without top-p (1, or unset) a Sampling draws what PickToken drew,
// draw for draw: samples from before top-p are unchanged.
func TestSamplingWithoutTopPIsPickToken(t *testing.T) {
	logits := logitsOf(0.1, 0.2, 0.3, 0.25, 0.15)
	for _, p := range []float64{0, 1} {
		a, b := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
		s := models.Sampling{Temperature: 0.8, TopK: 3, TopP: p}
		for i := range 500 {
			if x, y := s.Pick(logits, a), models.PickToken(logits, 0.8, 3, b); x != y {
				t.Fatalf("top-p %v, draw %d: %d, PickToken %d", p, i, x, y)
			}
		}
	}
}

func TestSamplingCheck(t *testing.T) {
	for _, s := range []models.Sampling{
		{Temperature: -1, TopK: 1}, {Temperature: math.NaN(), TopK: 1}, {Temperature: math.Inf(1), TopK: 1},
		{Temperature: 1, TopK: 0}, {Temperature: 1, TopK: 1, TopP: -0.1}, {Temperature: 1, TopK: 1, TopP: 1.5},
		{Temperature: 1, TopK: 1, TopP: math.NaN()},
	} {
		if s.Check() == nil {
			t.Errorf("%+v: accepted", s)
		}
	}
	if err := (models.Sampling{Temperature: 0, TopK: 1, TopP: 1}).Check(); err != nil {
		t.Error(err)
	}
}
