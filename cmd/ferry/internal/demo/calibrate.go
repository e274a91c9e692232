package demo

import (
	"fmt"
	"math"

	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/plan"
	"ferry/train"
)

// FitProfile sets p.MemoryBytesPerSec so that the meta device predicts
// the time of a training step of a small origin model on dev: everything
// that is not a matrix product or a copy (bias, ReLU, their gradients, the
// loss, the optimizer, and the tensor layer's own work) is charged to it.
// Where dev holds data it then fits the host optimizer's rate and the copy
// share (see fitSteps). Each figure is the median of all the steps of its
// kind, the kinds alternating, so that a machine's background load weighs
// on all alike.
func FitProfile(dev device.Device, p *meta.Profile, o plan.CalibrateOptions) error {
	cfg := DefaultConfig(dev.Name())
	cfg.Sizes = models.Sizes{"layers": 8, "width": float64(o.Width), "batch": float64(o.Batch)}
	cfg.Steps = max(3, int(o.Seconds/0.1))
	return fitSteps(dev, p, o, cfg, 2)
}

// FitModelProfile returns a plan.CalibrateOptions.Fit that does what
// FitProfile does on training steps of family f at sizes s (its usual
// optimizer, as cmd/ferry/predict runs it), three rounds of each kind.
// Whatever a step spends beyond its matrix products at the rate Calibrate
// measured (attention, softmax, layer norm, GELU, the optimizer, the
// tensor layer's own work) is charged to the elementwise rate. Modes
// offload, offload-disk, recompute and recompute-offload, the optimizer
// inside backward and planned policies are not fitted: they are the held-out test of the
// profile. Calibrate should time products at the
// model's own shapes (its workload's MatmulShape).
func FitModelProfile(f models.Family, s models.Sizes) func(device.Device, *meta.Profile, plan.CalibrateOptions) error {
	return func(dev device.Device, p *meta.Profile, o plan.CalibrateOptions) error {
		cfg := DefaultConfig(dev.Name())
		cfg.Family, cfg.Sizes = f, s
		if err := models.Validate(f, cfg.sizes()); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		cfg.Steps = max(3, int(o.Seconds/0.1))
		return fitSteps(dev, p, o, cfg, 3)
	}
}

// fitKinds are the steps fitSteps times: mode none with everything on the
// device; the optimizer's state and the gradients on the host; the
// parameters there too, streamed to the device around their uses.
var fitKinds = []struct {
	name       string
	mode       string
	stateHost  bool
	paramsHost bool
}{{"none", None, false, false}, {"state on host", None, true, false}, {"parameters on host", None, true, true}}

// fitSteps times training steps of cfg's model on dev, rounds rounds of
// each kind in fitKinds (alternating), and fits one figure to each kind's
// median step: p.MemoryBytesPerSec to mode none; where dev holds data,
// p.HostOptimizerBytesPerSec (the host optimizer's reads and writes, on
// the host's cores) to the step with the optimizer's state and the
// gradients on the host, and p.CopyComputeShare (what compute loses to a
// copy on a side stream) to the step with the parameters streamed from
// the host too, whose copies are the largest of any placement. The last
// two depend on each other (gradient copies run on side streams), so they
// are fitted in turn until they settle.
func fitSteps(dev device.Device, p *meta.Profile, o plan.CalibrateOptions, cfg Config, rounds int) error {
	cfg.Open = func(string, device.Options) (device.Device, error) { return unclosable{dev}, nil }
	cfg.DiskDir = o.DiskDir
	withKind := func(c Config, k int) Config {
		c.Modes = []string{fitKinds[k].mode}
		if fitKinds[k].stateHost {
			c.OptimizerState, c.GradsOnHost = "host", true
		}
		if fitKinds[k].paramsHost {
			c.ParamsOnHost = []string{"*"}
		}
		return c
	}
	predict := func(q meta.Profile, k int) (float64, error) {
		c := withKind(cfg, k)
		c.Steps, c.SkipWarmup = 1, true
		c.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, &q), nil }
		res, err := Execute(c)
		if err != nil {
			return 0, err
		}
		return res.Runs[0].StepSeconds, nil
	}
	kinds := 1
	if device.HasData(dev) {
		kinds = len(fitKinds)
	}
	var times [][]float64
	var measured, fitted float64
	const rateLo, rateHi = 1e6, 1e15
	// A step can measure faster than its matrix products alone are
	// predicted to take when the products were timed while the machine
	// was busier (two cores shared with other work). The steps are timed
	// once more before the fit is given up.
	for try := 0; try < 2; try++ {
		times = make([][]float64, kinds)
		for r := 0; r < rounds; r++ {
			for k := range kinds {
				res, err := Execute(withKind(cfg, k))
				if err != nil {
					return fmt.Errorf("calibrate: timing training steps (%s): %w", fitKinds[k].name, err)
				}
				times[k] = append(times[k], res.Runs[0].StepSecondsAll...)
			}
		}
		measured = train.Median(times[0])
		var err error
		if fitted, err = fitRate(p, measured, rateLo, rateHi, func(q meta.Profile) (float64, error) { return predict(q, 0) }); err != nil {
			return err
		}
		if fitted <= rateHi/2 {
			break
		}
	}
	switch {
	case fitted < 2*rateLo:
		return fmt.Errorf("calibrate: no elementwise rate in [%g, %g] B/s predicts the measured step of %.4g s "+
			"(the matrix products and per-kernel costs alone are predicted to take far shorter); is the device shared with other work?", rateLo, rateHi, measured)
	case fitted > rateHi/2:
		// Products alone predict more than the step took, twice: the
		// elementwise work is below what the timings can resolve. The
		// profile stays usable, its elementwise work nearly free, and
		// says so.
		fitted = rateHi
		p.Source = fmt.Sprintf("elementwise rate not fitted: the measured step (%.4g s) was shorter than its matrix products are predicted to take, "+
			"so elementwise work is taken as free; rerun on an idle machine for a fitted rate", measured)
	}
	p.MemoryBytesPerSec = fitted
	if kinds == 1 {
		return nil
	}
	stateHost, paramsHost := train.Median(times[1]), train.Median(times[2])
	p.HostOptimizerBytesPerSec = p.MemoryBytesPerSec
	for i := 0; i < 4; i++ {
		// The host optimizer's rate: the prediction falls as it grows.
		rate, err := fitRate(p, stateHost, rateLo, rateHi, func(q meta.Profile) (float64, error) {
			q.HostOptimizerBytesPerSec = q.MemoryBytesPerSec
			q.MemoryBytesPerSec = p.MemoryBytesPerSec
			return predict(q, 1)
		})
		if err != nil {
			return err
		}
		p.HostOptimizerBytesPerSec = min(rate, 1e16)
		// The copy share: the prediction rises with it.
		lo, hi := 0.0, 10.0
		for j := 0; j < 40; j++ {
			q := *p
			q.CopyComputeShare = (lo + hi) / 2
			t, err := predict(q, 2)
			if err != nil {
				return err
			}
			if t < paramsHost {
				lo = q.CopyComputeShare
			} else {
				hi = q.CopyComputeShare
			}
		}
		p.CopyComputeShare = (lo + hi) / 2
	}
	return nil
}

// fitRate bisects on the logarithm of the elementwise rate in [lo, hi]
// for the one whose prediction of a step in mode none is measured: the
// prediction falls as the rate grows. A result near hi means even free
// elementwise work is predicted slower than measured; near lo, that no
// rate is slow enough.
func fitRate(p *meta.Profile, measured, lo, hi float64, predict func(meta.Profile) (float64, error)) (float64, error) {
	for i := 0; i < 60; i++ {
		q := *p
		q.MemoryBytesPerSec = math.Sqrt(lo * hi)
		t, err := predict(q)
		if err != nil {
			return 0, err
		}
		if t > measured {
			lo = q.MemoryBytesPerSec
		} else {
			hi = q.MemoryBytesPerSec
		}
	}
	return math.Sqrt(lo * hi), nil
}

// unclosable lends a device to code that closes what it opens.
type unclosable struct{ device.Device }

func (unclosable) Close() error { return nil }
