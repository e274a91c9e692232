package nn_test

import (
	"fmt"
	"math/rand/v2"
	"os"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
)

// A GPT written as Hugging Face's transformers writes GPT-2, so that
// GPT2LMHeadModel.from_pretrained(dir) reads it; ferry reads it back
// (LoadSafetensors detects the Conv1D layout).
func ExampleSaveHF() {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	g, err := nn.NewGPT(dev, nn.GPTConfig{Vocab: 50, Seq: 16, Layers: 1, Heads: 2, Embd: 8, Bias: true}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nn.Release(g)
	dir, _ := os.MkdirTemp("", "gpt2")
	defer os.RemoveAll(dir)
	if err := nn.SaveHF(dir, g, nil); err != nil {
		fmt.Println(err)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fmt.Println(e.Name())
	}
	ts, _ := nn.HFTensors(g)
	for _, t := range ts[:4] {
		fmt.Println(t.Name, t.Shape)
	}
	// Output:
	// config.json
	// model.safetensors
	// transformer.wte.weight [50 8]
	// transformer.wpe.weight [16 8]
	// transformer.h.0.ln_1.weight [8]
	// transformer.h.0.ln_1.bias [8]
}
