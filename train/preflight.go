package train

import (
	"fmt"

	"ferry/device"
)

// StateSizer is an optimizer that says how much state it keeps: the
// bytes of optimizer state for one parameter tensor of n elements (AdamW,
// two float32 moments: 8n; SGD with momentum: 4n, without: 0).
type StateSizer interface {
	StateBytes(n int64) int64
}

// Footprint is the least memory a run needs, as Preflight checks it:
// float32 parameters with a gradient each and the optimizer's state, each
// on the device or in host memory, one step's activations on the device,
// and one batch in host memory.
type Footprint struct {
	// Params is the number of parameters (float32 elements).
	Params int64
	// Optimizer sizes the optimizer's state, counting the parameters as
	// one tensor (a lower bound for one that rounds each tensor up); nil
	// keeps none.
	Optimizer StateSizer
	// ParamsOnHost, GradsOnHost and StateOnHost put the parameters, the
	// gradients and the optimizer state in host memory instead of on the
	// device (offload.Setup's ParamsOnHost and GradsOnHost, optim.OnHost).
	// Streamed parameters count on the host only: the device holds a few
	// at a time.
	ParamsOnHost, GradsOnHost, StateOnHost bool
	// Inference counts the parameters alone, without gradients or
	// optimizer state: an evaluation's footprint (ferry eval, sample).
	Inference bool
	// StepBytes is the least one step's activations take on the device.
	StepBytes int64
	// BatchBytes is what one batch takes in host memory (the Go heap);
	// with Inference, every batch the command holds there.
	BatchBytes int64
}

// state is the training state's bytes on the device and in host memory.
func (f Footprint) state() (onDevice, onHost int64) {
	place := func(host bool, bytes int64) {
		if host {
			onHost += bytes
		} else {
			onDevice += bytes
		}
	}
	place(f.ParamsOnHost, 4*f.Params)
	if f.Inference {
		return onDevice, onHost
	}
	place(f.GradsOnHost, 4*f.Params)
	if f.Optimizer != nil {
		place(f.StateOnHost, f.Optimizer.StateBytes(f.Params))
	}
	return onDevice, onHost
}

// Preflight refuses a run whose Footprint cannot fit, before anything
// large is allocated: the training state on the device with StepBytes
// against the device's capacity, the training state in host memory
// against hostFree, and BatchBytes against a quarter of hostFree.
// hostFree is the machine's free memory (cpu.AvailableMemory; 0 when
// unknown, which skips the host's checks); it is the capacity, too, of a
// CPU device whose allocator reports none. The estimates are lower
// bounds, so a refused run could not have run; the device's own limit
// still catches the rest, with an error. advice ends each error and says
// what to lower.
func Preflight(dev device.Device, f Footprint, hostFree int64, advice string) error {
	onDevice, onHost := f.state()
	need := onDevice + f.StepBytes
	c := dev.Allocator().Stats().Capacity
	if kind, _, _ := device.ParseName(dev.Name()); c == 0 && kind == "cpu" {
		c = hostFree // the CPU device's memory is the machine's
	}
	if c > 0 && need > c {
		what := "with gradients and optimizer state"
		if f.Inference {
			what = "for inference"
		}
		return fmt.Errorf("this run needs at least %s on %s (%d parameters %s: %s; activations: %s), "+
			"and the device holds %s: %s",
			device.FormatBytes(need), dev.Name(), f.Params, what, device.FormatBytes(onDevice),
			device.FormatBytes(f.StepBytes), device.FormatBytes(c), advice)
	}
	if hostFree > 0 && onHost > hostFree {
		return fmt.Errorf("the training state on the host (--optimizer-state, --gradients, --parameters host) needs %s for %d parameters, and the machine has %s free: %s",
			device.FormatBytes(onHost), f.Params, device.FormatBytes(hostFree), advice)
	}
	if hostFree > 0 && f.BatchBytes > hostFree/4 {
		what := "one batch needs"
		if f.Inference {
			what = "the batches held in host memory need"
		}
		return fmt.Errorf("%s %s of host memory, and the machine has %s free: %s",
			what, device.FormatBytes(f.BatchBytes), device.FormatBytes(hostFree), advice)
	}
	return nil
}
