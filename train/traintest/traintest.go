// Package traintest runs a small model through the Trainer once per memory
// mode, for the tests of devices and offloading: every mode must give the
// bits of mode none, and modes that move saved tensors must hold fewer
// bytes after forward.
package traintest

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
)

// MLP is a regression task: Layers of Linear(Width, Width) + ReLU, Rows
// samples a batch, MSE against random targets; batches are drawn from
// (Seed, step, micro-batch).
type MLP struct {
	Dev                 device.Device
	Layers, Width, Rows int
	Seed                uint64
	seq                 *nn.Sequential
	// AfterForward is the device's allocated bytes when the last forward
	// returned (saved tensors still in flight counted).
	AfterForward int64
}

// Model builds the model on first use.
func (m *MLP) Model() nn.Module {
	if m.seq == nil {
		rng := rand.New(rand.NewPCG(m.Seed, 1))
		var mods []nn.Module
		for i := 0; i < m.Layers; i++ {
			l, err := nn.NewLinear(m.Dev, m.Width, m.Width, true, rng)
			if err != nil {
				panic(err)
			}
			mods = append(mods, l, nn.ReLU{})
		}
		m.seq = nn.NewSequential(mods...)
	}
	return m.seq
}

func (m *MLP) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(m.Seed, uint64(step)<<8|uint64(micro)))
	return ferry.Randn(m.Dev, rng, m.Rows, m.Width), ferry.Randn(m.Dev, rng, m.Rows, m.Width), m.Rows, nil
}

func (m *MLP) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	var out *ferry.Tensor
	if recompute {
		out = nn.Checkpoint{Module: m.seq}.Forward(x)
	} else {
		out = m.seq.Forward(x)
	}
	m.AfterForward = m.Dev.Allocator().Allocated()
	return out
}

func (m *MLP) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(out, y) }

// Run is one mode's run.
type Run struct {
	Mode         offload.Mode
	Losses       []float64
	ParamHash    uint64 // of every parameter's bits after the last step
	AfterForward int64
	Offloaded    int64 // bytes to host and disk over the run
}

// Equal reports whether r and o trained to the same bits.
func (r Run) Equal(o Run) bool {
	if r.ParamHash != o.ParamHash || len(r.Losses) != len(o.Losses) {
		return false
	}
	for i := range r.Losses {
		if math.Float64bits(r.Losses[i]) != math.Float64bits(o.Losses[i]) {
			return false
		}
	}
	return true
}

// RunModes trains a fresh MLP of layers × width at batch for steps SGD
// steps in each mode, on a device open makes for each.
func RunModes(open func() (device.Device, error), modes []offload.Mode, diskDir string, layers, width, batch, steps int) ([]Run, error) {
	var runs []Run
	for _, mode := range modes {
		dev, err := open()
		if err != nil {
			return nil, err
		}
		r, err := runMode(dev, mode, diskDir, layers, width, batch, steps)
		dev.Close()
		if err != nil {
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func runMode(dev device.Device, mode offload.Mode, diskDir string, layers, width, batch, steps int) (Run, error) {
	task := &MLP{Dev: dev, Layers: layers, Width: width, Rows: batch, Seed: 7}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewSGD(model.Parameters(), 0.01)
	defer opt.Release()
	r := Run{Mode: mode}
	tr, err := train.New(dev, task, train.Config{Steps: steps, Optimizer: opt, Memory: offload.Setup{Mode: mode, DiskDir: diskDir},
		Hooks: train.Hooks{Step: func(s train.StepInfo) { r.Losses = append(r.Losses, s.Loss) }}})
	if err != nil {
		return r, err
	}
	defer tr.Close()
	res, err := tr.Run(context.Background())
	if err != nil {
		return r, err
	}
	r.AfterForward = task.AfterForward
	if res.Offload != nil {
		r.Offloaded = res.Offload.BytesToHost + res.Offload.BytesToDisk
	}
	h := fnv.New64a()
	for _, p := range model.Parameters() {
		v := p.Float32s()
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*4))
		binary.Write(h, binary.LittleEndian, int64(len(v)))
	}
	r.ParamHash = h.Sum64()
	return r, nil
}
