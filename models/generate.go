package models

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

// Generate continues prompt by n bytes from a byte-level language model
// (vocabulary 256), sampling each from the top k of softmax(logits /
// temperature) (temperature 0: the likeliest, greedy), one forward pass
// per byte over the last Context() bytes, in evaluation mode (no
// dropout), leaving the model in training mode. An empty prompt starts
// from "\n". When ctx ends, it returns what it has with ctx's error.
func Generate(ctx context.Context, g LanguageModel, dev device.Device, prompt []byte, n int, temperature float64, topK int, rng *rand.Rand) (string, error) {
	if len(prompt) == 0 {
		prompt = []byte{'\n'}
	}
	ids := make([]int32, len(prompt))
	for i, b := range prompt {
		ids[i] = int32(b)
	}
	out, err := GenerateTokens(ctx, g, dev, ids, n, temperature, topK, rng)
	b := make([]byte, len(out))
	for i, id := range out {
		b[i] = byte(id)
	}
	if err != nil && ctx.Err() == nil {
		return "", err
	}
	return string(b), err
}

// GenerateTokens is Generate over token ids: it returns prompt followed
// by n sampled ids (fewer when ctx ends). The prompt must not be empty.
// Logits that are not finite are an error: nothing sensible samples from
// them.
func GenerateTokens(ctx context.Context, g LanguageModel, dev device.Device, prompt []int32, n int, temperature float64, topK int, rng *rand.Rand) ([]int32, error) {
	nn.SetTraining(g, false)
	defer nn.SetTraining(g, true)
	out := append([]int32(nil), prompt...)
	for range n {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		ids := out[max(0, len(out)-g.Context()):]
		var logits []float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				x := tape.Adopt(ferry.FromInt32s(dev, ids, 1, len(ids)))
				all := g.Forward(x).Float32s()
				logits = all[(len(ids)-1)*g.Vocab():]
			})
			return nil
		})
		if err != nil {
			return out, err
		}
		for _, v := range logits {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return out, fmt.Errorf("the model's logits are %v: its weights diverged (finite but huge, or damaged); sample from an earlier checkpoint", v)
			}
		}
		out = append(out, int32(PickToken(logits, temperature, topK, rng)))
	}
	return out, nil
}

// PickTopK samples a byte from the top k of softmax(logits / temperature).
func PickTopK(logits []float32, temperature float64, k int, rng *rand.Rand) byte {
	return byte(PickToken(logits, temperature, k, rng))
}

// PickToken samples an index of logits from the top k of softmax(logits /
// temperature). Temperature 0 (or below) is greedy: the likeliest index,
// the lowest of equals, drawing nothing from rng.
func PickToken(logits []float32, temperature float64, k int, rng *rand.Rand) int {
	if temperature <= 0 {
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
	k = max(1, min(k, len(idx)))
	idx = idx[:k]
	p := make([]float64, k)
	var sum float64
	for i, j := range idx {
		p[i] = math.Exp((float64(logits[j]) - float64(logits[idx[0]])) / temperature)
		sum += p[i]
	}
	u := rng.Float64() * sum
	for i := range p {
		if u -= p[i]; u <= 0 {
			return idx[i]
		}
	}
	return idx[k-1]
}
