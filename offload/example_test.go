package offload_test

import (
	"fmt"
	"log"
	"math/rand/v2"
	"slices"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu" // registers "cpu" with device.Open
	"ferry/nn"
	"ferry/offload"
)

// An offloader with a policy: the policy file (what `ferry plan` writes)
// sends every saved activation to host memory except those of the last
// layer, which backward needs first. The offloader's hooks are pushed on
// the tape around forward; the gradients are those of a step without
// offloading, bit for bit.
//
// Of the 12 tensors forward saves (each Linear its input and weight, each
// ReLU its output), the 4 weights and the last ReLU's output are kept by
// the policy; 3 Linear inputs share storage with the ReLU output before
// them and move with it; the step's input stays, as the caller holds it
// (copying it would free nothing). That leaves 3 ReLU outputs of 32 × 64
// float32 moved to the host. (How many come back by copy depends on
// timing, so this example does not print it.)
func Example() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var layers []nn.Module
	for range 4 {
		l, err := nn.NewLinear(dev, 64, 64, true, rng)
		if err != nil {
			log.Fatal(err)
		}
		layers = append(layers, l, nn.ReLU{})
	}
	model := nn.NewSequential(layers...) // modules "0" … "7"
	defer nn.Release(model)
	x := ferry.Randn(dev, rng, 32, 64)
	defer x.Release()

	policy, err := offload.ParsePolicy([]byte(`{
		"version": 1,
		"default": "host",
		"layers": {"6": "keep", "7": "keep"}
	}`))
	if err != nil {
		log.Fatal(err)
	}
	cfg := offload.DefaultConfig()
	cfg.Policy = policy.Place // consulted for each saved activation; parameters always stay
	off, err := offload.New(dev, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer off.Close()

	var grads [][]float32
	for _, hooks := range []*ferry.SavedTensorHooks{nil, off.Hooks()} {
		err := ferry.Step(func(tape *ferry.Tape) error {
			in := tape.Input(x)
			var y *ferry.Tensor
			if hooks == nil {
				y = model.Forward(in)
			} else {
				tape.WithHooks(hooks, func() { y = model.Forward(in) })
			}
			return ferry.Sum(ferry.Square(y)).Backward()
		})
		if err != nil {
			log.Fatal(err)
		}
		grads = append(grads, model.Parameters()[0].Grad().Float32s())
		for _, p := range model.Parameters() {
			p.SetGrad(nil)
		}
	}
	st := off.Stats()
	fmt.Println("saved:", st.SavedTensors, "kept:", st.Kept, "shared:", st.Deduplicated,
		"held outside:", st.HeldOutside, "offloaded:", st.Offloaded)
	fmt.Println("to host:", device.FormatBytes(st.BytesToHost))
	fmt.Println("same gradients:", slices.Equal(grads[0], grads[1]))
	// Output:
	// saved: 12 kept: 5 shared: 3 held outside: 1 offloaded: 3
	// to host: 24.00 KiB
	// same gradients: true
}
