package models

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

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
	return GenerateSampled(ctx, g, dev, prompt, n, Sampling{Temperature: temperature, TopK: topK}, rng)
}

// generate continues prompt by n ids, each picked from the logits of the
// last position, one forward pass per id over the last Context() ids, in
// evaluation mode (no dropout), leaving the model in training mode.
func generate(ctx context.Context, g LanguageModel, dev device.Device, prompt []int32, n int, pick func([]float32) int) ([]int32, error) {
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
		out = append(out, int32(pick(logits)))
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
	return Sampling{Temperature: temperature, TopK: k}.Pick(logits, rng)
}
