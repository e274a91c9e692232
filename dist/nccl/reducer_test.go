package nccl_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/dist"
	"ferry/dist/nccl"
	"ferry/dist/nccl/standin"
	"ferry/nn"
	"ferry/optim"
)

// gpuRank is one rank's CUDA device on the fake driver, with device
// pointers that are host addresses (what the stand-in reads), and, with
// NCCL, its communicator on that device.
type gpuRank struct {
	dev  *cuda.Device
	host dist.Comm
	dc   *nccl.DeviceComm
	nc   *nccl.Comm
}

// openRanks opens, on rank r of the in-process group comms, a fake GPU
// and (withNCCL) a clique of the stand-in over it, the unique id
// exchanged over the group.
func openRank(l *standin.Lib, comms []dist.Comm, r int, withNCCL bool) (*gpuRank, error) {
	dev, err := cuda.Open(fake.New(fake.Options{HostAddresses: true}), 0, device.Options{})
	if err != nil {
		return nil, err
	}
	g := &gpuRank{dev: dev, host: comms[r]}
	if !withNCCL {
		return g, nil
	}
	var id nccl.UniqueID
	var idErr error
	if r == 0 {
		id, idErr = nccl.GetUniqueID()
	}
	if id, err = nccl.ExchangeID(comms[r], id, idErr); err != nil {
		return nil, err
	}
	if g.nc, err = nccl.InitRank(len(comms), id, r); err != nil {
		return nil, err
	}
	g.dc = nccl.OnDevice(g.nc, dev)
	g.dc.Settle = func(s cu.Stream) error { return l.StreamWait(uintptr(s), 10*time.Second) }
	return g, nil
}

func (g *gpuRank) close() {
	if g.nc != nil {
		g.nc.Destroy()
	}
	g.dev.Close()
}

// wideNet is Linear(24,40) → ReLU → Linear(40,5) on dev, the same for a
// seed.
func wideNet(dev device.Device, seed uint64) (*nn.Sequential, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	l1, err := nn.NewLinear(dev, 24, 40, true, rng)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(dev, 40, 5, true, rng)
	if err != nil {
		return nil, err
	}
	return nn.NewSequential(l1, nn.ReLU{}, l2), nil
}

// trainGPU trains wideNet on rank r for steps SGD steps, its gradients
// averaged through the DeviceReducer on NCCL (g.dc) or the host
// GradientReducer over the group, and returns the parameters after each.
func trainGPU(g *gpuRank, r, size, steps int) ([][][]float32, error) {
	m, err := wideNet(g.dev, uint64(40+r)) // ranks start apart: Broadcast
	if err != nil {
		return nil, err
	}
	defer nn.Release(m)
	ps := m.Parameters()
	var red interface {
		GradReady(*ferry.Tensor)
		Wait() error
		Broadcast(int) error
		CheckParameters() error
	}
	if g.dc != nil {
		dr, err := dist.NewDeviceReducer(g.dc, g.dev, ps, dist.ReducerOptions{BucketBytes: 1000})
		if err != nil {
			return nil, err
		}
		defer dr.Close()
		red = dr
	} else if red, err = dist.NewGradientReducer(g.host, ps, dist.ReducerOptions{BucketBytes: 1000}); err != nil {
		return nil, err
	}
	if err := red.Broadcast(0); err != nil {
		return nil, err
	}
	opt := optim.NewSGD(ps, 0.1)
	var out [][][]float32
	const rows = 3
	for step := 1; step <= steps; step++ {
		rng := rand.New(rand.NewPCG(uint64(step), 5))
		x, y := make([]float32, size*rows*24), make([]float32, size*rows*5)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range y {
			y[i] = float32(rng.NormFloat64())
		}
		xt := ferry.FromFloat32s(g.dev, x[r*rows*24:(r+1)*rows*24], rows, 24)
		yt := ferry.FromFloat32s(g.dev, y[r*rows*5:(r+1)*rows*5], rows, 5)
		err := ferry.Step(func(tape *ferry.Tape) error {
			loss := ferry.MSELoss(m.Forward(tape.Input(xt)), tape.Input(yt))
			return loss.BackwardWith(ferry.BackwardOptions{GradReady: red.GradReady})
		})
		xt.Release()
		yt.Release()
		if err != nil {
			return nil, err
		}
		if err := red.Wait(); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
		opt.ZeroGrad()
		var now [][]float32
		for _, p := range ps {
			now = append(now, p.Float32s())
		}
		out = append(out, now)
	}
	return out, red.CheckParameters()
}

// On two ranks of fake GPUs, gradients averaged on the device through
// NCCL (the stand-in: a+b, as the host's sum) train to the parameters of
// the host path (each bucket downloaded and reduced over the group), bit
// for bit, with 0 stand-in violations.
func TestDeviceReducerOnStandin(t *testing.T) {
	l := setup(t)
	const size, steps = 2, 3
	results := map[bool][][][][]float32{}
	for _, withNCCL := range []bool{false, true} {
		comms := dist.NewGroup(size)
		res := make([][][][]float32, size)
		errs := ranks(size, func(r int) error {
			g, err := openRank(l, comms, r, withNCCL)
			if err != nil {
				return err
			}
			defer g.close()
			res[r], err = trainGPU(g, r, size, steps)
			return err
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("NCCL %v, rank %d: %v", withNCCL, r, err)
			}
		}
		results[withNCCL] = res
	}
	if n := l.Counter("collectives"); n < steps {
		t.Fatalf("the stand-in ran %d collectives", n)
	}
	for r := range size {
		for s := range steps {
			for i, want := range results[false][r][s] {
				got := results[true][r][s][i]
				for k := range want {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("rank %d, step %d, parameter %d[%d]: %v on NCCL, %v through the host", r, s+1, i, k, got[k], want[k])
					}
				}
			}
		}
	}
}
