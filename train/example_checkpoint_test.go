package train_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
)

// How a training loop uses a Checkpointer: lock the directory for the
// whole run, resume under the run's identity (every setting that changes
// the mathematics, and the data's hash), save at step boundaries, and let
// the signal handler remove a checkpoint in flight (train.RemoveTemporaries)
// before it exits at once.
func ExampleCheckpointer() {
	dir, _ := os.MkdirTemp("", "ferry-example-")
	defer os.RemoveAll(dir)
	dev, _ := device.Open("cpu", device.Options{})
	defer dev.Close()
	lin, _ := nn.NewLinear(dev, 4, 2, true, rand.New(rand.NewPCG(1, 1)))
	opt := optim.NewAdamW(lin.Parameters(), 1e-3)
	defer opt.Release()

	text := []byte("the training text")
	identity := map[string]any{"task": "example", "lr": 1e-3, "steps": 10, "clip": 0.0,
		"data_sha256": train.HashBytes(text)}

	ck := &train.Checkpointer{Dir: filepath.Join(dir, "ck"), Keep: 2}
	unlock, err := ck.Lock() // at start: fails at once if another run holds it, or it is not writable
	if err != nil {
		fmt.Println(err)
		return
	}
	defer unlock()
	meta, _, err := ck.Resume(lin, opt, identity)
	fmt.Println("resumed:", meta != nil, err)
	for step := 1; step <= 3; step++ {
		// ... a training step ...
		if _, err := ck.Save(lin, opt, train.Meta{Step: step, Identity: identity}); errors.Is(err, train.ErrNonFinite) {
			fmt.Println("diverged; the previous checkpoint is kept")
			return
		}
	}
	_, err = (&train.Checkpointer{Dir: ck.Dir}).Lock()
	fmt.Println(errors.Is(err, train.ErrDirInUse))

	// A later run with another learning rate is refused, unless it says
	// --override lr (recorded in its checkpoints).
	identity["lr"] = 5e-4
	_, _, err = (&train.Checkpointer{Dir: ck.Dir}).Resume(lin, opt, identity)
	fmt.Println(err != nil)
	later := &train.Checkpointer{Dir: ck.Dir, Overrides: []string{"lr"}}
	meta, _, err = later.Resume(lin, opt, identity)
	fmt.Println(meta.Step, err)
	// Output:
	// resumed: false <nil>
	// true
	// true
	// 3 <nil>
}
