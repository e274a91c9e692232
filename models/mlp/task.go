// Package mlp registers the mlp family, the origin model (layers ×
// (Linear(width, width) + ReLU), MSE, SGD; the demo's default, its
// parameters named layers.N.weight), and holds the MNIST classifier that
// `ferry train mnist` trains (Classifier): Linear+ReLU hidden layers under
// PyTorch's nn.Sequential names (0.weight, 2.weight, …).
package mlp

import (
	"fmt"
	"strings"

	"math/rand/v2"

	"ferry"
	"ferry/data/mnist"
	"ferry/device"
	"ferry/nn"
	"ferry/train"
)

// Classifier is an MLP classifying MNIST's digits with cross-entropy.
// Each epoch visits the training set in an order keyed by (seed, epoch).
type Classifier struct {
	Data          *mnist.Set
	Depth, Width  int
	Rows          int // images per step
	Seed          uint64
	StepsPerEpoch int
	// DataID identifies the data's content (a hash), for the identity.
	DataID string
	ranks  int
	seq    *nn.Sequential
	linear []*nn.Linear
	dev    device.Device
}

// NewClassifier makes depth hidden layers of width on dev, for ranks
// data-parallel ranks of rows images each (1: one process).
func NewClassifier(dev device.Device, data *mnist.Set, depth, width, rows, ranks int, seed uint64) (*Classifier, error) {
	if rows < 1 || ranks < 1 || rows*ranks > data.TrainCount() {
		return nil, fmt.Errorf("batch %d × %d ranks: want 1 to the %d training images", rows, ranks, data.TrainCount())
	}
	t := &Classifier{dev: dev, Data: data, Rows: rows, Seed: seed, Depth: depth, Width: width, ranks: ranks}
	t.StepsPerEpoch = (data.TrainCount() + rows*ranks - 1) / (rows * ranks)
	rng := rand.New(rand.NewPCG(seed, 0x6d6c70))
	var mods []nn.Module
	in := data.Pixels()
	for i := 0; i <= depth; i++ {
		out := width
		if i == depth {
			out = 10
		}
		l, err := nn.NewLinear(dev, in, out, true, rng)
		if err != nil {
			for _, l := range t.linear {
				nn.Release(l)
			}
			return nil, err
		}
		t.linear = append(t.linear, l)
		mods = append(mods, l)
		if i < depth {
			mods = append(mods, nn.ReLU{})
		}
		in = out
	}
	t.seq = nn.NewSequential(mods...)
	return t, nil
}

// Describe is one line about the model and data.
func (t *Classifier) Describe() string {
	widths := strings.TrimSuffix(strings.Repeat(fmt.Sprint(t.Width)+"→", t.Depth), "→")
	if t.Depth > 0 {
		widths += "→"
	}
	return fmt.Sprintf("MLP %d→%s10 (%d hidden layers of %d, ReLU), batch %d, on MNIST (%d training, %d test images)",
		t.Data.Pixels(), widths, t.Depth, t.Width, t.Rows, t.Data.TrainCount(), t.Data.TestCount())
}

// Title titles the plots.
func (t *Classifier) Title() string {
	return fmt.Sprintf("MLP %d×%d on MNIST, batch %d", t.Depth, t.Width, t.Rows)
}

func (t *Classifier) Model() nn.Module { return t.seq }

func (t *Classifier) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	if !recompute {
		return t.seq.Forward(x)
	}
	// Each hidden Linear+ReLU is a checkpointed segment, named as
	// Sequential names it; the last Linear runs plainly.
	h := x
	for i, l := range t.linear {
		var y *ferry.Tensor
		tape.PushModule(fmt.Sprint(2 * i))
		if i < len(t.linear)-1 {
			y = nn.Checkpoint{Module: &nn.Sequential{Modules: []nn.Module{l, nn.ReLU{}}}}.Forward(h)
		} else {
			y = l.Forward(h)
		}
		tape.PopModule()
		if h != x {
			h.Release()
		}
		h = y
	}
	return h
}

func (t *Classifier) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// Batch takes the step's slice of its epoch's order; micro-batches are
// the following slices.
func (t *Classifier) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	return t.BatchShard(step, micro, 0, 1)
}

// BatchShard is rank's Rows of the step's global batch of ranks·Rows
// images (train.Sharder).
func (t *Classifier) BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, items int, err error) {
	if size != t.ranks && size != 1 {
		return nil, nil, 0, fmt.Errorf("mlp: the classifier was made for %d ranks, not %d", t.ranks, size)
	}
	i := step - 1
	epoch, k := i/t.StepsPerEpoch, i%t.StepsPerEpoch
	order := mnist.EpochOrder(t.Seed, epoch, t.Data.TrainCount())
	lo := ((k+micro)*t.Rows*size + rank*t.Rows) % len(order)
	idx := order[lo:min(lo+t.Rows, len(order))]
	x, y = mnist.Gather(t.dev, t.Data.TrainImages, t.Data.TrainLabels, t.Data.Pixels(), idx)
	return x, y, len(idx), nil
}

// Evaluate runs the test set: accuracy and mean cross-entropy.
func (t *Classifier) Evaluate() ([]train.Metric, error) {
	s, err := t.EvaluateShard(0, 1)
	if err != nil {
		return nil, err
	}
	ms := make([]train.Metric, len(s))
	for i, m := range s {
		ms[i] = train.Metric{Name: m.Name, Value: m.Sum / m.Count, Better: m.Better}
	}
	return ms, nil
}

// EvaluateShard runs rank's share of the test set, images
// [rank·n/size, (rank+1)·n/size) of its n (train.ShardEvaluator): the
// number right and the summed cross-entropy, over the images.
func (t *Classifier) EvaluateShard(rank, size int) ([]train.MetricSum, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("mlp: rank %d of %d ranks", rank, size)
	}
	n := t.Data.TestCount()
	first, end := rank*n/size, (rank+1)*n/size
	const chunk = 1000
	correct, lossSum := 0, 0.0
	for at := first; at < end; at += chunk {
		idx := make([]int, 0, chunk)
		for j := at; j < min(at+chunk, end); j++ {
			idx = append(idx, j)
		}
		x, y := mnist.Gather(t.dev, t.Data.TestImages, t.Data.TestLabels, t.Data.Pixels(), idx)
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				logits := t.seq.Forward(tape.Input(x))
				lossSum += float64(ferry.CrossEntropy(logits, tape.Input(y)).Item()) * float64(len(idx))
				vals, labels := logits.Float32s(), y.Int32s()
				for r := range idx {
					best := 0
					for c := 1; c < 10; c++ {
						if vals[r*10+c] > vals[r*10+best] {
							best = c
						}
					}
					if int32(best) == labels[r] {
						correct++
					}
				}
			})
			return nil
		})
		x.Release()
		y.Release()
		if err != nil {
			return nil, err
		}
	}
	items := float64(end - first)
	return []train.MetricSum{
		{Name: "test_accuracy", Sum: float64(correct), Count: items, Better: train.Higher},
		{Name: "test_loss", Sum: lossSum, Count: items, Better: train.Lower},
	}, nil
}

// Identity is what a checkpoint must match.
func (t *Classifier) Identity() map[string]any {
	id := map[string]any{"task": "mnist", "depth": t.Depth, "width": t.Width, "batch": t.Rows, "seed": t.Seed}
	if t.DataID != "" {
		id["data"] = t.DataID
	}
	return id
}

// Release frees the model.
func (t *Classifier) Release() { nn.Release(t.seq) }
