package optim_test

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/optim"
)

// An AdamW whose moments live in host memory: the device holds the
// parameters and gradients only, and the result is the device
// optimizer's, bit for bit.
func ExampleOnHost() {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	w := ferry.FromFloat32s(dev, []float32{1, 2, 3, 4}).SetName("w")
	defer w.Release()
	opt := optim.NewAdamW([]*ferry.Tensor{w}, 0.1, optim.OnHost())
	defer opt.Release()
	for range 3 {
		w.SetGrad(ferry.FromFloat32s(dev, []float32{1, -1, 0.5, 0}))
		if err := opt.Step(); err != nil {
			fmt.Println(err)
			return
		}
		opt.ZeroGrad()
	}
	fmt.Printf("%.4f\n", w.Float32s())
	fmt.Println("state on the device:", dev.Allocator().Stats().ByCategory[device.OptimizerState].Peak, "bytes")
	fmt.Println("state on the host:", opt.HostStateBytes(), "bytes") // moments and staging, 8 bytes an element each
	// Output:
	// [0.6973 2.2937 2.6913 3.9880]
	// state on the device: 0 bytes
	// state on the host: 64 bytes
}
