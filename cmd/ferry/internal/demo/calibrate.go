package demo

import (
	"fmt"
	"math"

	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
	"ferry/plan"
	"ferry/train"
)

// FitProfile sets p.MemoryBytesPerSec so that the meta device predicts
// the time of a training step of a small origin model on dev: everything
// that is not a matrix product or a copy (bias, ReLU, their gradients, the
// loss, the optimizer, and the tensor layer's own work) is charged to it.
// Then it sets p.CopyComputeShare so that steps offloading every activation
// are predicted too. Steps with and without offloading alternate, and each
// figure is the median of all of them, so that a machine's background load
// weighs on both alike.
func FitProfile(dev device.Device, p *meta.Profile, o plan.CalibrateOptions) error {
	cfg := DefaultConfig(dev.Name())
	cfg.Sizes = models.Sizes{"layers": 8, "width": float64(o.Width), "batch": float64(o.Batch)}
	cfg.Modes = []string{None}
	if device.HasData(dev) {
		cfg.Modes = []string{None, Offload, None, Offload}
	}
	cfg.Steps = max(3, int(o.Seconds/0.1))
	return fitSteps(dev, p, cfg)
}

// FitModelProfile returns a plan.CalibrateOptions.Fit that does what
// FitProfile does on training steps of family f at sizes s (its usual
// optimizer, as cmd/ferry/predict runs it): the elementwise rate is fitted
// to steps in mode none, the copy share to steps in mode offload (every
// save moved to the host), three of each, alternating. Whatever a step
// spends beyond its matrix products at the rate Calibrate measured
// (attention, softmax, layer norm, GELU, the optimizer, the tensor layer's
// own work) is charged to the elementwise rate. Modes recompute and
// recompute-offload and planned policies are not fitted: they are the
// held-out test of the profile. Calibrate should time products at the
// model's own shapes (its workload's MatmulShape).
func FitModelProfile(f models.Family, s models.Sizes) func(device.Device, *meta.Profile, plan.CalibrateOptions) error {
	return func(dev device.Device, p *meta.Profile, o plan.CalibrateOptions) error {
		cfg := DefaultConfig(dev.Name())
		cfg.Family, cfg.Sizes = f, s
		if err := models.Validate(f, cfg.sizes()); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		cfg.Modes = []string{None}
		if device.HasData(dev) {
			cfg.Modes = []string{None, Offload, None, Offload, None, Offload}
		}
		cfg.Steps = max(3, int(o.Seconds/0.1))
		return fitSteps(dev, p, cfg)
	}
}

// fitSteps times cfg's modes on dev (none, and offload where dev holds
// data), then fits p.MemoryBytesPerSec to the median step of mode none and
// p.CopyComputeShare to that of mode offload.
func fitSteps(dev device.Device, p *meta.Profile, cfg Config) error {
	cfg.Open = func(string, device.Options) (device.Device, error) { return unclosable{dev}, nil }
	predict := func(q meta.Profile, pol *offload.Policy) (float64, error) {
		c := cfg
		c.Steps, c.SkipWarmup, c.Modes = 1, true, []string{None}
		if pol.Default != offload.Keep {
			c.Modes = []string{Offload}
		}
		c.Policy = pol.Place
		c.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, &q), nil }
		res, err := Execute(c)
		if err != nil {
			return 0, err
		}
		return res.Runs[0].StepSeconds, nil
	}
	var times map[string][]float64
	var measured, fitted float64
	const rateLo, rateHi = 1e6, 1e15
	// A step can measure faster than its matrix products alone are
	// predicted to take when the products were timed while the machine
	// was busier (two cores shared with other work). The steps are timed
	// once more before the fit is given up.
	for try := 0; try < 2; try++ {
		res, err := Execute(cfg)
		if err != nil {
			return fmt.Errorf("calibrate: timing training steps: %w", err)
		}
		times = map[string][]float64{}
		for _, r := range res.Runs {
			times[r.Mode] = append(times[r.Mode], r.StepSecondsAll...)
		}
		measured = train.Median(times[None])
		if fitted, err = fitRate(p, measured, rateLo, rateHi, predict); err != nil {
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
	if len(times[Offload]) == 0 {
		return nil
	}
	// The share of copy time compute loses: the prediction rises with it.
	measured = train.Median(times[Offload])
	moved := &offload.Policy{Version: 1, Default: offload.Auto}
	lo, hi := 0.0, 10.0
	for i := 0; i < 40; i++ {
		q := *p
		q.CopyComputeShare = (lo + hi) / 2
		t, err := predict(q, moved)
		if err != nil {
			return err
		}
		if t < measured {
			lo = q.CopyComputeShare
		} else {
			hi = q.CopyComputeShare
		}
	}
	p.CopyComputeShare = (lo + hi) / 2
	return nil
}

// fitRate bisects on the logarithm of the elementwise rate in [lo, hi]
// for the one whose prediction of a step in mode none is measured: the
// prediction falls as the rate grows. A result near hi means even free
// elementwise work is predicted slower than measured; near lo, that no
// rate is slow enough.
func fitRate(p *meta.Profile, measured, lo, hi float64, predict func(meta.Profile, *offload.Policy) (float64, error)) (float64, error) {
	keep := &offload.Policy{Version: 1, Default: offload.Keep}
	for i := 0; i < 60; i++ {
		q := *p
		q.MemoryBytesPerSec = math.Sqrt(lo * hi)
		t, err := predict(q, keep)
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
