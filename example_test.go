package ferry_test

import (
	"fmt"
	"log"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu" // registers "cpu" with device.Open
)

// A model of one weight matrix: forward on a tape, an MSE loss, backward,
// and the gradient read from the parameter. The numbers are small enough
// to check by hand: y = x·w = [5 11], the loss is ((5-4)² + (11-10)²)/2 = 1,
// and dL/dw = xᵀ·(y-target) = [4 6].
func Example() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	// A parameter lives outside any step; it requires grad, so gradients
	// reaching it through a tape add up in w.Grad().
	w := ferry.FromFloat32s(dev, []float32{1, 2}, 2, 1).RequireGrad()
	defer w.Release()
	x := ferry.FromFloat32s(dev, []float32{1, 2, 3, 4}, 2, 2)
	defer x.Release()
	target := ferry.FromFloat32s(dev, []float32{4, 10}, 2, 1)
	defer target.Release()

	err = ferry.Step(func(tape *ferry.Tape) error {
		y := ferry.MatMul(tape.Input(x), tape.Input(w))
		loss := ferry.MSELoss(y, tape.Input(target))
		if err := loss.Backward(); err != nil {
			return err
		}
		fmt.Println("y:", y.Float32s())
		fmt.Println("loss:", loss.Item())
		return nil
	}) // what the step made (y, loss, saved tensors) is freed here
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dL/dw:", w.Grad().Float32s())
	// Output:
	// y: [5 11]
	// loss: 1
	// dL/dw: [4 6]
}

// A device's allocator keeps PyTorch's statistics: bytes allocated now and
// at the peak, broken down by what they hold. Forward here adds the
// product and its ReLU (64 KiB each, kept for backward); after the step,
// the weights, the input and the weights' gradient remain.
func Example_memoryStatistics() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	alloc := dev.Allocator()

	// 256 × 1024 float32 weights: 1 MiB, counted as parameters.
	w := ferry.Full(dev, 0.01, 1024, 256).SetCategory(device.Parameter).RequireGrad()
	defer w.Release()
	x := ferry.Ones(dev, 64, 1024) // a batch of 64: 256 KiB of activations
	defer x.Release()

	err = ferry.Step(func(tape *ferry.Tape) error {
		alloc.ResetPeak()
		before := alloc.Allocated()
		h := ferry.ReLU(ferry.MatMul(tape.Input(x), tape.Input(w)))
		fmt.Println("forward added:", device.FormatBytes(alloc.Allocated()-before))
		if err := ferry.Sum(h).Backward(); err != nil {
			return err
		}
		st := alloc.Stats()
		fmt.Println("parameters:", device.FormatBytes(st.ByCategory[device.Parameter].Current))
		fmt.Println("gradients:", device.FormatBytes(st.ByCategory[device.Gradient].Current))
		fmt.Println("peak:", device.FormatBytes(st.AllocatedBytes.Peak))
		fmt.Println("flat key:", st.Flat()["allocated_bytes.all.peak"] == st.AllocatedBytes.Peak)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the step:", device.FormatBytes(alloc.Allocated()))
	// Output:
	// forward added: 128.00 KiB
	// parameters: 1.00 MiB
	// gradients: 1.00 MiB
	// peak: 3.38 MiB
	// flat key: true
	// after the step: 2.25 MiB
}
