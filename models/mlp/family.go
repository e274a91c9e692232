package mlp

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	"ferry/models"
	"ferry/nn"
)

func init() { models.Register(family{}) }

// maxLayers bounds the depth: a step records every layer's ops, so a
// larger model is refused up front rather than run for hours.
const maxLayers = 100_000

// family is the origin model: Layers × (Linear(Width, Width) + ReLU),
// trained with MSE against a random target and SGD, run by a hand-written
// loop as the original PyTorch user's was.
type family struct{}

func (family) Name() string { return "mlp" }
func (family) Summary() string {
	return "the origin model: Linear+ReLU layers of one width, MSE, SGD"
}

func (family) Sizes() []models.Size {
	return []models.Size{
		{Name: "layers", Usage: "Linear+ReLU layers", Default: models.KindDefault(40, 40), Integer: true, Min: 1, Max: maxLayers},
		{Name: "width", Usage: "layer width", Default: models.KindDefault(1024, 4096), Integer: true, Min: 1, Max: 1 << 30},
		{Name: "batch", Usage: "rows per batch", Default: models.KindDefault(256, 1024), Integer: true, Min: 1, Max: 1 << 30},
	}
}

func (family) Check(s models.Sizes) error {
	l, w, b := s.Int("layers"), s.Int("width"), s.Int("batch")
	if _, _, err := device.ShapeBytes([]int{l, w, w + 1}, 4); err != nil {
		return fmt.Errorf("mlp: parameters of %d × Linear(%d, %d): %w", l, w, w, err)
	}
	if _, _, err := device.ShapeBytes([]int{l + 1, b, w}, 4); err != nil {
		return fmt.Errorf("mlp: activations of %d layers at batch %d, width %d: %w", l, b, w, err)
	}
	return nil
}

func (f family) Workload(dev device.Device, s models.Sizes, seed uint64) (models.Workload, error) {
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0xfe77))
	w := &workload{batch: s.Int("batch"), sizes: s}
	for i := 0; i < s.Int("layers"); i++ {
		l, err := nn.NewLinear(dev, s.Int("width"), s.Int("width"), true, rng)
		if err != nil {
			w.Release()
			return nil, err
		}
		// Named as the layers' saved tensors are (module layers.N), so
		// that a policy can name them.
		l.Weight.SetName(fmt.Sprintf("layers.%d.weight", i))
		if l.Bias != nil {
			l.Bias.SetName(fmt.Sprintf("layers.%d.bias", i))
		}
		w.layers = append(w.layers, l)
	}
	return w, nil
}

// workload is the origin model at one size.
type workload struct {
	layers []*nn.Linear
	batch  int
	sizes  models.Sizes
}

func (m *workload) width() int { return m.sizes.Int("width") }

func (m *workload) Parameters() []*ferry.Tensor {
	var ps []*ferry.Tensor
	for _, l := range m.layers {
		ps = append(ps, l.Parameters()...)
	}
	return ps
}

func (m *workload) Release() {
	for _, p := range m.Parameters() {
		p.Release()
	}
}

func (m *workload) Data(dev device.Device, seed uint64) (input, target *ferry.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 0x1277))
	input = ferry.Randn(dev, rng, m.batch, m.width())
	target = ferry.Randn(dev.Host(), rng, m.batch, m.width())
	return input, target
}

func (m *workload) Loss(y, target *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(y, target) }

// Optimizer is plain SGD at 1e-3, as the origin user trained.
func (m *workload) Optimizer() (string, float32) { return "sgd", 1e-3 }

func (m *workload) Describe() string {
	return fmt.Sprintf("%d × (Linear(%d, %d) + ReLU), batch %d, MSE loss", len(m.layers), m.width(), m.width(), m.batch)
}

func (m *workload) ParameterCount() int64 {
	w := int64(m.width())
	return int64(len(m.layers)) * (w*w + w)
}

func (m *workload) ActivationBytes() int64 { return int64(m.batch) * int64(m.width()) * 4 }

func (m *workload) MatmulShape() (rows, width int) { return m.batch, m.width() }

// Smaller halves the batch.
func (m *workload) Smaller() []models.Variant {
	var vs []models.Variant
	for b := m.batch / 2; b >= 1; b /= 2 {
		s := models.Sizes{}
		for k, v := range m.sizes {
			s[k] = v
		}
		s["batch"] = float64(b)
		vs = append(vs, models.Variant{Change: fmt.Sprintf("batch %d", b), Sizes: s})
	}
	return vs
}

func (m *workload) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	return m.forward(tape, x, false, recompute)
}

// ForwardNaive is the origin user's mistake: each layer's input copied to
// the host and the copy thrown away, which frees nothing.
func (m *workload) ForwardNaive(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor {
	return m.forward(tape, x, true, false)
}

// forward runs the layers on x (which stays the caller's).
func (m *workload) forward(tape *ferry.Tape, x *ferry.Tensor, naive, recompute bool) *ferry.Tensor {
	h := x
	for i, l := range m.layers {
		tape.PushModule(fmt.Sprintf("layers.%d", i))
		var y *ferry.Tensor
		layer := func(xs ...*ferry.Tensor) *ferry.Tensor {
			z := l.Forward(xs[0]) // Linear saves its input
			defer z.Release()     // as Python drops it: nothing else refers to z
			return ferry.ReLU(z)  // ReLU saves its output
		}
		if recompute { // each layer a checkpoint segment: only its input is kept
			y = tape.Checkpoint(layer, h)
		} else { // a segment recomputed where the tape's SegmentHooks say
			y = tape.Segment(layer, h)
		}
		tape.PopModule()
		if naive {
			c := h.To(h.Device().Host()) // prev_tensor.to('cpu', non_blocking=True)
			c.Release()                  // ... and the result is thrown away
		}
		if h != x {
			h.Release() // the loop variable moves on; the tape keeps what it saved
		}
		h = y
	}
	return h
}
