package nn_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
)

// A model saved by ferry loads into PyTorch with
// model.load_state_dict(safetensors.torch.load_file(path)), and a file from
// PyTorch's safetensors.torch.save_model loads into ferry the same way.
func ExampleSaveSafetensors() {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	mlp := func() *nn.Sequential {
		l1, _ := nn.NewLinear(dev, 8, 16, true, rng)
		l2, _ := nn.NewLinear(dev, 16, 4, true, rng)
		return nn.NewSequential(l1, nn.ReLU{}, l2)
	}
	a, b := mlp(), mlp()
	defer nn.Release(a)
	defer nn.Release(b)

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "mlp.safetensors")
	if err := nn.SaveSafetensors(path, a); err != nil {
		fmt.Println(err)
		return
	}
	if err := nn.LoadSafetensors(path, b); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Parameters()[3].Float32s()[0] == b.Parameters()[3].Float32s()[0])

	// A model of another shape is refused, every difference listed at once.
	small, _ := nn.NewLinear(dev, 8, 2, true, rng)
	defer nn.Release(small)
	err := nn.LoadSafetensors(path, nn.NewSequential(small))
	fmt.Println(err != nil)
	// Output:
	// true
	// true
}
