package models

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

// Generate continues prompt by n bytes from a byte-level language model
// (vocabulary 256), sampling each from the top k of softmax(logits /
// temperature), one forward pass per byte over the last Context() bytes,
// in evaluation mode (no dropout), leaving the model in training mode.
// An empty prompt starts from "\n". When ctx ends, it returns what it has
// with ctx's error.
func Generate(ctx context.Context, g LanguageModel, dev device.Device, prompt []byte, n int, temperature float64, topK int, rng *rand.Rand) (string, error) {
	nn.SetTraining(g, false)
	defer nn.SetTraining(g, true)
	out := append([]byte(nil), prompt...)
	if len(out) == 0 {
		out = []byte{'\n'}
	}
	for range n {
		if err := ctx.Err(); err != nil {
			return string(out), err
		}
		ctx := out[max(0, len(out)-g.Context()):]
		ids := make([]int32, len(ctx))
		for i, b := range ctx {
			ids[i] = int32(b)
		}
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
			return "", err
		}
		out = append(out, PickTopK(logits, temperature, topK, rng))
	}
	return string(out), nil
}

// PickTopK samples a byte from the top k of softmax(logits / temperature).
func PickTopK(logits []float32, temperature float64, k int, rng *rand.Rand) byte {
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
			return byte(idx[i])
		}
	}
	return byte(idx[k-1])
}
