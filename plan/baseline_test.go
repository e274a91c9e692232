package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/optim"
)

// gpt is a small GPT of the planner's own tests: random tokens,
// cross-entropy, AdamW, each block a segment.
type gpt struct {
	cfg   nn.GPTConfig
	batch int
}

func (m gpt) String() string {
	return fmt.Sprintf("test gpt %d×%d, %d heads, seq %d, vocab %d, batch %d", m.cfg.Layers, m.cfg.Embd, m.cfg.Heads, m.cfg.Seq, m.cfg.Vocab, m.batch)
}

func (m gpt) Build(dev device.Device, inBackward bool) (*Step, error) {
	g, err := nn.NewGPT(dev, m.cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		return nil, err
	}
	opt := optim.NewAdamW(g.Parameters(), 3e-4)
	tok := make([]int32, m.batch*m.cfg.Seq)
	x := ferry.FromInt32s(dev, tok, m.batch, m.cfg.Seq)
	y := ferry.FromInt32s(dev.Host(), tok, m.batch, m.cfg.Seq)
	run := func(tape *ferry.Tape) error {
		l := ferry.CrossEntropy(g.Forward(tape.Input(x)), tape.Adopt(y.To(dev)))
		if inBackward {
			o, upd := optim.InBackward(opt)
			if err := l.BackwardWith(o); err != nil {
				return err
			}
			return upd.Err()
		}
		if err := l.Backward(); err != nil {
			return err
		}
		if err := opt.Step(); err != nil {
			return err
		}
		opt.ZeroGrad()
		return nil
	}
	return &Step{Run: run, Release: func() {
		x.Release()
		y.Release()
		opt.Release()
		nn.Release(g)
	}}, nil
}

// The plan is never worse than all-recompute or all-offload where those
// fit: over small GPTs and MLPs and budgets from below the smaller of the
// two to above the unlimited peak, whenever either fits the plan fits,
// its replay is within the budget and its step is no slower.
func TestPlanNeverWorseThanBaselines(t *testing.T) {
	h100, err := LoadProfile("h100-pcie5")
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		m Model
		p *meta.Profile
	}
	cases := []tc{
		// The case: all-offload fits at 720 KiB, the cost model
		// alone finds nothing.
		{gpt{nn.GPTConfig{Vocab: 256, Seq: 16, Layers: 2, Heads: 2, Embd: 32, Bias: true, Dropout: 0.1, Seed: 1}, 4}, h100},
		{gpt{nn.GPTConfig{Vocab: 65, Seq: 32, Layers: 3, Heads: 2, Embd: 32, Bias: true, Seed: 1}, 2}, testProfile},
		{mlp{layers: 4, width: 64, batch: 256}, testProfile},
	}
	if !testing.Short() {
		cases = append(cases,
			tc{gpt{nn.GPTConfig{Vocab: 128, Seq: 32, Layers: 4, Heads: 4, Embd: 64, Bias: true, Dropout: 0.1, Seed: 1}, 4}, testProfile},
			tc{gpt{nn.GPTConfig{Vocab: 256, Seq: 16, Layers: 3, Heads: 2, Embd: 32, Bias: true, Seed: 1}, 8}, h100},
			tc{mlp{layers: 6, width: 32, batch: 512}, h100})
	}
	const steps = 12
	checked, baselineFits := 0, 0
	for _, c := range cases {
		full, err := Make(Options{Model: c.m, Profile: c.p, Budget: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		lo := min(full.AllOffload.PeakBytes, full.AllRecompute.PeakBytes) * 9 / 10
		hi := full.Unlimited.PeakBytes * 21 / 20
		for i := 0; i <= steps; i++ {
			budget := lo + (hi-lo)*int64(i)/steps
			p, err := Make(Options{Model: c.m, Profile: c.p, Budget: budget})
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for name, b := range map[string]Baseline{"all recompute": p.AllRecompute, "all offload": p.AllOffload} {
				if !b.Fits {
					continue
				}
				baselineFits++
				switch {
				case !p.Fits:
					t.Errorf("%s, budget %d: %s fits (peak %d) but the plan says nothing fits", c.m, budget, name, b.PeakBytes)
				// Keeping everything and moving what hides under compute
				// can differ in the last bits of the meta clock.
				case p.Predicted.StepSeconds > b.StepSeconds*(1+1e-9):
					t.Errorf("%s, budget %d: plan %.12g s, slower than %s %.12g s", c.m, budget, p.Predicted.StepSeconds, name, b.StepSeconds)
				}
			}
			if p.Fits && p.Predicted.PeakBytes > budget {
				t.Errorf("%s, budget %d: plan peaks at %d", c.m, budget, p.Predicted.PeakBytes)
			}
		}
	}
	t.Logf("%d plans, %d fitting baselines compared", checked, baselineFits)
}
