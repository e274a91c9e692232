package ferry_test

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// The GPT against PyTorch: testdata/golden/gpt/model.json, written by
// testdata/golden/gpt/gen.py (PyTorch 1.13, nanoGPT's structure, tied
// embedding, dropout 0), holds initial weights, five batches, the logits
// and gradients of the first step, each step's loss, and every parameter
// after five AdamW steps (weight decay 0.1 on matrices and embeddings, 0
// on biases and LayerNorms, nanoGPT's groups).

type goldGPT struct {
	Model struct {
		Config    goldGPTConfig `json:"config"`
		Optimizer struct {
			LR, Beta1, Beta2, Eps float32
			WeightDecay           float32 `json:"weight_decay"`
		} `json:"optimizer"`
		Names   []string              `json:"names"`
		Init    map[string]goldTensor `json:"init"`
		Tokens  []goldTensor          `json:"tokens"`
		Targets []goldTensor          `json:"targets"`
		Logits0 goldTensor            `json:"logits0"`
		Losses  []float64             `json:"losses"`
		Grads0  map[string]goldTensor `json:"grads0"`
		Final   map[string]goldTensor `json:"final"`
	} `json:"model"`
}

func TestGoldenGPT(t *testing.T) {
	b, err := os.ReadFile("testdata/golden/gpt/model.json")
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 testdata/golden/gpt/gen.py)", err)
	}
	var g goldGPT
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	m := g.Model
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		model, decay, noDecay := newGoldGPT(t, dev, m.Config, m.Init, m.Names)
		defer nn.Release(model)
		params := model.Parameters()
		opts := []*optim.AdamW{optim.NewAdamW(decay, m.Optimizer.LR), optim.NewAdamW(noDecay, m.Optimizer.LR)}
		opts[0].WeightDecay, opts[1].WeightDecay = m.Optimizer.WeightDecay, 0
		for _, o := range opts {
			o.Beta1, o.Beta2, o.Eps = m.Optimizer.Beta1, m.Optimizer.Beta2, m.Optimizer.Eps
			defer o.Release()
		}
		for step := range m.Losses {
			tok, tgt := m.Tokens[step].tensor(t, dev), m.Targets[step].tensor(t, dev)
			var loss float32
			err := ferry.Step(func(tape *ferry.Tape) error {
				logits := model.Forward(tape.Input(tok))
				if step == 0 {
					closeTo(t, "logits", logits.Shape(), logits.Float32s(), &m.Logits0, tolerance{1e-4, 1e-5})
				}
				l := ferry.CrossEntropy(logits, tape.Input(tgt))
				loss = l.Float32s()[0]
				return l.Backward()
			})
			tok.Release()
			tgt.Release()
			if err != nil {
				t.Fatal(err)
			}
			if d := math.Abs(float64(loss) - m.Losses[step]); d > 1e-4*math.Abs(m.Losses[step]) {
				t.Errorf("step %d: loss %v, PyTorch %v", step, loss, m.Losses[step])
			}
			if step == 0 {
				for _, p := range params {
					want := m.Grads0[p.Name()]
					closeTo(t, "gradient of "+p.Name(), p.Grad().Shape(), p.Grad().Float32s(), &want, tolerance{1e-4, 1e-4 * want.maxAbs(t)})
				}
			}
			for _, o := range opts {
				if err := o.Step(); err != nil {
					t.Fatal(err)
				}
				o.ZeroGrad()
			}
		}
		for _, p := range params {
			want := m.Final[p.Name()]
			// Within 1e-4 relative to the tensor's largest magnitude.
			closeTo(t, "final "+p.Name(), p.Shape(), p.Float32s(), &want, tolerance{0, 1e-4 * want.maxAbs(t)})
		}
	})
}

// goldGPTConfig is a golden GPT's sizes, as the generators write them.
type goldGPTConfig struct {
	Vocab, Seq, Layers, Heads, Embd int
	Dropout                         float32
	Bias                            bool
}

// newGoldGPT builds the GPT of c from the golden initial weights on dev,
// checks its parameters are PyTorch's, named and ordered as names, and
// returns it with its parameters in nanoGPT's two optimizer groups:
// matrices and embeddings (weight decay), and the rest.
func newGoldGPT(t *testing.T, dev device.Device, c goldGPTConfig, init map[string]goldTensor, names []string) (model *nn.GPT, decay, noDecay []*ferry.Tensor) {
	t.Helper()
	cfg := nn.GPTConfig{Vocab: c.Vocab, Seq: c.Seq, Layers: c.Layers, Heads: c.Heads, Embd: c.Embd, Dropout: c.Dropout, Bias: c.Bias}
	w := map[string]*ferry.Tensor{}
	for n, v := range init {
		w[n] = v.tensor(t, dev)
	}
	model, err := nn.NewGPTFromWeights(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	params := model.Parameters()
	if len(params) != len(names) {
		nn.Release(model)
		t.Fatalf("%d parameters, PyTorch has %d", len(params), len(names))
	}
	for i, p := range params {
		if p.Name() != names[i] {
			nn.Release(model)
			t.Fatalf("parameter %d is %q, PyTorch's %q", i, p.Name(), names[i])
		}
		if p.Rank() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	return model, decay, noDecay
}
