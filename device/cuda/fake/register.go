package fake

import (
	"fmt"
	"strconv"
	"time"

	"ferry/device"
	"ferry/device/cuda"
)

// Importing this package registers the kind "fakecuda": the CUDA device
// over a fake driver of its own, so that code written for a GPU (offload
// engines, the CLI) runs anywhere, asynchronously, with slow copies on
// demand. Params: "copy_delay" (a duration added to every copy, as on the
// CPU device), "kernel_delay", "memory" (the fake GPU's bytes), "no_cublas"
// (true: matrix products on ferry's fallback kernel); the rest go to
// cuda.Open.
func init() { device.Register("fakecuda", registered{}) }

type registered struct{}

func (registered) Open(index int, opts device.Options) (device.Device, error) {
	fo := Options{Devices: index + 1}
	rest := map[string]string{}
	for k, v := range opts.Params {
		var err error
		switch k {
		case "copy_delay":
			fo.CopyDelay, err = time.ParseDuration(v)
		case "kernel_delay":
			fo.KernelDelay, err = time.ParseDuration(v)
		case "memory":
			fo.Memory, err = strconv.ParseInt(v, 10, 64)
		case "no_cublas":
			fo.NoBLAS, err = strconv.ParseBool(v)
		default:
			rest[k] = v
		}
		if err != nil {
			return nil, fmt.Errorf("fakecuda: %s=%q: %v", k, v, err)
		}
	}
	opts.Params = rest
	return cuda.Open(New(fo), index, opts)
}
