package nn_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/nn"
)

// savedPerBlock runs forward of a GPT on the meta device and counts what
// its ops save, as bench/gpt_saved_bytes.py counts PyTorch's: each storage
// once, at its full size, parameters excluded, charged to the block that
// saved it first ("outside" for embeddings, ln_f and the head).
func savedPerBlock(t *testing.T, cfg nn.GPTConfig, batch int) map[string]int64 {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	m, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	seen := map[any]bool{}
	bytes := map[string]int64{}
	hooks := &ferry.SavedTensorHooks{
		Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
			if !info.Parameter && !seen[x.Storage()] {
				seen[x.Storage()] = true
				owner := "outside"
				if rest, ok := strings.CutPrefix(info.Module, "transformer.h."); ok {
					owner, _, _ = strings.Cut(rest, ".")
				}
				bytes[owner] += x.StorageBytes()
			}
			return x
		},
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	tok := ferry.FromInt32s(dev, make([]int32, batch*cfg.Seq), batch, cfg.Seq)
	defer tok.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		tape.WithHooks(hooks, func() { m.Forward(tape.Input(tok)) }) //ferry:discard the tape owns the output
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes
}

// PyTorch 1.13's eager saved bytes per GPT-2 124M block at batch 8 × 1024,
// float32 (769.1 MiB), measured with `/usr/bin/python3 bench/gpt_saved_bytes.py`
// (defaults: GPT-2 124M, batch 8) on 2026-12-02.
const pytorchSavedPerBlock = 806_486_024

func TestGPTSavesLessThanPyTorchPerBlock(t *testing.T) {
	cfg := nn.GPTConfig{Vocab: 50257, Seq: 1024, Layers: 12, Heads: 12, Embd: 768, Bias: true}
	b := savedPerBlock(t, cfg, 8)
	for i := 0; i < cfg.Layers; i++ {
		got := b[strconv.Itoa(i)]
		if got != b["0"] {
			t.Errorf("block %d saves %d bytes, block 0 %d", i, got, b["0"])
		}
	}
	t.Logf("ferry saves %d bytes per block (PyTorch 1.13 eager: %d), %d outside the blocks", b["0"], int64(pytorchSavedPerBlock), b["outside"])
	if b["0"] > pytorchSavedPerBlock {
		t.Errorf("ferry saves %d bytes per block, more than PyTorch's %d", b["0"], int64(pytorchSavedPerBlock))
	}
}
