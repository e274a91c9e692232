package models

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"ferry/device"
)

// Sampling is how each generated token is drawn from the model's logits,
// as Hugging Face's generate does: the logits are divided by Temperature,
// only the TopK likeliest tokens are kept, then of those only the
// smallest set whose probabilities (renormalised over the TopK) sum to
// at least TopP (nucleus sampling), and a token is drawn from what is
// left in proportion to its probability. Temperature 0 is greedy: the
// likeliest token, the lowest id of equals, drawing nothing.
type Sampling struct {
	Temperature float64
	TopK        int     // ≥ 1; at least the vocabulary: no top-k cut
	TopP        float64 // in (0, 1]; 1 (or 0, the zero value): no nucleus cut
}

// Check refuses settings that cannot draw: a negative or non-finite
// temperature, TopK below 1, TopP outside (0, 1].
func (s Sampling) Check() error {
	if !(s.Temperature >= 0) || math.IsInf(s.Temperature, 0) {
		return fmt.Errorf("temperature must be finite and ≥ 0 (0: greedy), got %v", s.Temperature)
	}
	if s.TopK < 1 {
		return fmt.Errorf("top-k must be a positive integer, got %d", s.TopK)
	}
	if s.TopP != 0 && !(s.TopP > 0 && s.TopP <= 1) {
		return fmt.Errorf("top-p must be in (0, 1] (1: no nucleus cut), got %v", s.TopP)
	}
	return nil
}

// Pick draws an index of logits (one uniform draw from rng unless
// greedy).
func (s Sampling) Pick(logits []float32, rng *rand.Rand) int {
	if s.Temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	k := max(1, min(s.TopK, len(idx)))
	idx = idx[:k]
	p := make([]float64, k)
	var sum float64
	for i, j := range idx {
		p[i] = math.Exp((float64(logits[j]) - float64(logits[idx[0]])) / s.Temperature)
		sum += p[i]
	}
	if s.TopP > 0 && s.TopP < 1 {
		// The nucleus: the likeliest tokens until their share reaches
		// TopP; the first is always kept.
		var before float64
		for i := range p {
			if i > 0 && before >= s.TopP*sum {
				p, idx = p[:i], idx[:i]
				break
			}
			before += p[i]
		}
		sum = 0
		for _, v := range p {
			sum += v
		}
	}
	u := rng.Float64() * sum
	for i := range p {
		if u -= p[i]; u <= 0 {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// GenerateSampled is GenerateTokens drawing each token by s.
func GenerateSampled(ctx context.Context, g LanguageModel, dev device.Device, prompt []int32, n int, s Sampling, rng *rand.Rand) ([]int32, error) {
	return generate(ctx, g, dev, prompt, n, func(logits []float32) int { return s.Pick(logits, rng) })
}
