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
// share (see fitSteps). Each figure is the median over its runs of each
// run's fast step (plan.FastQuantile), the kinds alternating, so that a
// machine's background load weighs on all alike.
func FitProfile(dev device.Device, p *meta.Profile, o plan.CalibrateOptions) error {
	cfg := DefaultConfig(dev.Name())
	cfg.Sizes = models.Sizes{"layers": 8, "width": float64(o.Width), "batch": float64(o.Batch)}
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
		return fitSteps(dev, p, o, cfg, 3)
	}
}

// fitKinds are the steps fitSteps times: mode none with everything on the
// device; the optimizer's state and the gradients on the host.
var fitKinds = []struct {
	name      string
	mode      string
	stateHost bool
}{{"none", None, false}, {"state on host", None, true}}

// fitSteps times training steps of cfg's model on dev, rounds rounds of
// each kind in fitKinds (alternating), each run as many steps as take
// about o.Seconds (fitStepsFor), and fits one figure to each kind's
// median over its runs of each run's fast step (plan.FastQuantile, as
// bench/cpu_clock.sh measures a run; the fast end of all the runs' steps
// together would be the fastest run's, faster than a run is):
// p.MemoryBytesPerSec to mode none; where dev holds data,
// p.HostOptimizerBytesPerSec (the host optimizer's reads and writes, on
// the host's cores) to the step with the optimizer's state and the
// gradients on the host. The copy share (what compute loses to a copy on
// a side stream) is measured by plan.Calibrate, not fitted: fitted to
// the step with the parameters streamed from the host (until
// 2026-12-06), whose copies on a small GPT are a millisecond a step, it
// absorbed the machine's noise (five fits within an hour gave 0 to
// 5.15); that step is now held out, like the others.
func fitSteps(dev device.Device, p *meta.Profile, o plan.CalibrateOptions, cfg Config, rounds int) error {
	cfg.Open = func(string, device.Options) (device.Device, error) { return unclosable{dev}, nil }
	cfg.DiskDir = o.DiskDir
	withKind := func(c Config, k int) Config {
		c.Modes = []string{fitKinds[k].mode}
		if fitKinds[k].stateHost {
			c.OptimizerState, c.GradsOnHost = "host", true
		}
		return c
	}
	predict := func(q meta.Profile, k int) (float64, error) {
		c := withKind(cfg, k)
		// A step after a warm-up, as demo predicts: the meta device's
		// first step is longer (the small GPT's by 1.3 % in mode none),
		// and fitted to it the elementwise rate came out too fast.
		c.Steps, c.SkipWarmup = 1, false
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
	cfg.Steps = 3
	if device.HasData(dev) {
		probe, err := Execute(withKind(cfg, 0))
		if err != nil {
			return fmt.Errorf("calibrate: timing training steps (%s): %w", fitKinds[0].name, err)
		}
		cfg.Steps = fitStepsFor(o.Seconds, probe.Runs[0].StepSeconds)
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
				times[k] = append(times[k], res.Runs[0].StepSecondsFast)
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
	// The host optimizer's rate: the prediction falls as it grows (the
	// gradients' copies to the host at the measured copy share).
	rate, err := fitRate(p, train.Median(times[1]), rateLo, rateHi, func(q meta.Profile) (float64, error) {
		q.HostOptimizerBytesPerSec = q.MemoryBytesPerSec
		q.MemoryBytesPerSec = p.MemoryBytesPerSec
		return predict(q, 1)
	})
	if err != nil {
		return err
	}
	p.HostOptimizerBytesPerSec = min(rate, 1e16)
	return nil
}

// fitStepsFor is how many steps of step seconds a timed run of fitSteps
// makes to spend about seconds: at least 3, at most 500. (A fixed count
// timed a 15 ms GPT step 10 times a run, 0.15 s: too few to take a
// median or a quantile from on a machine whose speed swings by a tenth.)
func fitStepsFor(seconds, step float64) int {
	if !(step > 0) {
		return 3
	}
	return int(min(500, max(3, seconds/step)))
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
