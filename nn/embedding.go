package nn

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/device"
)

// Embedding looks up rows of Weight [num, dim] by int32 indices (PyTorch:
// nn.Embedding).
type Embedding struct{ Weight *ferry.Tensor }

// NewEmbedding makes an embedding initialised normal(0, std) from rng
// (PyTorch's default is std 1; GPT-2 uses 0.02).
func NewEmbedding(dev device.Device, num, dim int, std float32, rng *rand.Rand) (*Embedding, error) {
	if num < 1 || dim < 1 {
		return nil, fmt.Errorf("nn.NewEmbedding: sizes must be positive, got %d × %d", num, dim)
	}
	var w *ferry.Tensor
	err := ferry.Catch(func() error { w = normal(dev, rng, std, num, dim); return nil })
	if err != nil {
		return nil, err
	}
	return &Embedding{Weight: NewParameter(w, "weight")}, nil
}

func (e *Embedding) Forward(idx *ferry.Tensor) *ferry.Tensor { return ferry.Embedding(e.Weight, idx) }
func (e *Embedding) Parameters() []*ferry.Tensor             { return []*ferry.Tensor{e.Weight} }
func (e *Embedding) NamedParameters() []Named                { return weightBias(e.Weight, nil) }
