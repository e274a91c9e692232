package nn_test

import (
	"fmt"
	"log"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

// A Llama with grouped-query attention (4 query heads share 2 key/value
// heads), its parameters under Hugging Face's names, and one training
// step. nn.LoadSafetensors(path, m) loads a LlamaForCausalLM file into
// it, and nn.LlamaConfigFromHF reads the config.json beside such a file.
func ExampleNewLlama() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	cfg := nn.LlamaConfig{Vocab: 64, Seq: 16, Layers: 2, Heads: 4, KVHeads: 2, Embd: 32, Hidden: 48, Seed: 1}
	m, err := nn.NewLlama(dev, cfg, nil) // nil: draw from cfg.Seed
	if err != nil {
		log.Fatal(err)
	}
	defer nn.Release(m)
	m.SetRecompute(true) // CheckpointBlocks: recompute each block in backward
	ps := nn.NamedParameters(m)
	fmt.Println(cfg.ParameterCount(), "parameters;", ps[0].Name, "...", ps[2].Name, ps[2].Tensor.Shape(), "...", ps[len(ps)-1].Name)

	tok := ferry.FromInt32s(dev, make([]int32, 2*16), 2, 16)
	defer tok.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		logits := m.Forward(tape.Input(tok))
		fmt.Println("logits", logits.Shape())
		return ferry.CrossEntropy(logits, tape.Input(tok)).Backward()
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("gradient of lm_head.weight:", m.LMHead.Weight.Grad().Shape())
	// Output:
	// 19616 parameters; model.embed_tokens.weight ... model.layers.0.self_attn.k_proj.weight [16 32] ... lm_head.weight
	// logits [2 16 64]
	// gradient of lm_head.weight: [64 32]
}
