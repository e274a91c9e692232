package nn

import (
	"math"
	"math/rand/v2"
	"sort"

	"ferry"
	"ferry/device"
)

// Generate continues prompt by n bytes from a byte-level GPT (vocabulary
// 256), sampling each from the top k of softmax(logits / temperature), one
// forward pass per byte over the last Seq bytes, with dropout off. It
// restores g's training mode when done. An empty prompt starts from "\n".
func Generate(g *GPT, dev device.Device, prompt []byte, n int, temperature float64, topK int, rng *rand.Rand) (string, error) {
	was := g.Dropout.Training
	g.SetTraining(false)
	defer g.SetTraining(was)
	out := append([]byte(nil), prompt...)
	if len(out) == 0 {
		out = []byte{'\n'}
	}
	for range n {
		ctx := out[max(0, len(out)-g.Config.Seq):]
		ids := make([]int32, len(ctx))
		for i, b := range ctx {
			ids[i] = int32(b)
		}
		var logits []float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				x := tape.Adopt(ferry.FromInt32s(dev, ids, 1, len(ids)))
				all := g.Forward(x).Float32s()
				logits = all[(len(ids)-1)*g.Config.Vocab:]
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
