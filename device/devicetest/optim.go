package devicetest

import (
	"fmt"
	"math"

	"ferry/device"
)

// refSGD is torch.optim.SGD's single-tensor step (PyTorch 1.13,
// _single_tensor_sgd), in float32 as PyTorch computes it on float32
// tensors.
func refSGD(w, g, buf []float32, p device.SGDParams) {
	for i := range w {
		d := g[i]
		if p.WeightDecay != 0 {
			d = d + float32(p.WeightDecay*w[i]) // d_p = d_p.add(param, alpha=weight_decay)
		}
		if p.Momentum != 0 {
			if p.First {
				buf[i] = d // buf = torch.clone(d_p).detach()
			} else {
				buf[i] = float32(buf[i]*p.Momentum) + float32((1-p.Dampening)*d) // buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
			}
			if p.Nesterov {
				d = d + float32(p.Momentum*buf[i]) // d_p = d_p.add(buf, alpha=momentum)
			} else {
				d = buf[i]
			}
		}
		w[i] = w[i] + float32(-p.LR*d) // param.add_(d_p, alpha=-lr)
	}
}

// refAdamW is torch.optim.AdamW's single-tensor step (PyTorch 1.13,
// _single_tensor_adamw, amsgrad off): scalars in float64 as Python computes
// them, tensor arithmetic in float32.
func refAdamW(w, g, m, v []float32, p device.AdamWParams) {
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	stepSize := float32(float64(p.LR) / bc1)
	bc2Sqrt := float32(math.Sqrt(bc2))
	for i := range w {
		w[i] *= 1 - p.LR*p.WeightDecay                                         // param.mul_(1 - lr * weight_decay)
		m[i] = float32(m[i]*p.Beta1) + float32(g[i]*(1-p.Beta1))               // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
		v[i] = float32(v[i]*p.Beta2) + float32(float32((1-p.Beta2)*g[i])*g[i]) // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
		denom := float32(float32(math.Sqrt(float64(v[i])))/bc2Sqrt) + p.Eps    // (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
		w[i] = w[i] + float32(-stepSize*m[i])/denom                            // param.addcdiv_(exp_avg, denom, value=-step_size)
	}
}

func testSGD(e *env) {
	ok := family[device.OptimizerKernels](e, "optimizer")
	configs := []device.SGDParams{
		{LR: 0.1},
		{LR: 0.1, WeightDecay: 0.01},
		{LR: 0.05, Momentum: 0.9},
		{LR: 0.05, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.001},
		{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01},
	}
	for _, n := range []int{7, large} {
		for ci, cfg := range configs {
			if n > 7 && ci != len(configs)-1 {
				continue // one large case is enough to cover the split across workers
			}
			w := seq(n, -1, 1)
			buf := make([]float32, n)
			param := e.tensor([]int{n}, w)
			var mom device.View // untouched without momentum
			if cfg.Momentum != 0 {
				mom = e.tensor([]int{n}, fill(n, float32(math.NaN()))) // the first step must not read it
			}
			for step := 0; step < 3; step++ {
				p := cfg
				p.First = step == 0
				name := fmt.Sprintf("n=%d %+v", n, p)
				g := seq(n, -0.5*float32(step+1), 0.7)
				grad := e.tensor([]int{n}, g)
				e.ok(ok.SGDStep(param, grad, mom, p), "SGDStep %s", name)
				refSGD(w, g, buf, p)
				e.near("SGD param "+name, e.read(param), f64(w))
				if cfg.Momentum != 0 {
					e.near("SGD momentum "+name, e.read(mom), f64(buf))
				}
			}
		}
	}
}

func testAdamW(e *env) {
	ok := family[device.OptimizerKernels](e, "optimizer")
	configs := []device.AdamWParams{
		{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2},
		{LR: 1e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6},
	}
	for _, n := range []int{7, large} {
		for ci, cfg := range configs {
			if n > 7 && ci > 0 {
				continue
			}
			w := seq(n, -1, 1)
			m, v := make([]float32, n), make([]float32, n)
			param := e.tensor([]int{n}, w)
			expAvg, expAvgSq := e.tensor([]int{n}, m), e.tensor([]int{n}, v)
			for step := 1; step <= 3; step++ {
				p := cfg
				p.Step = step
				name := fmt.Sprintf("n=%d %+v", n, p)
				g := seq(n, -0.3*float32(step), 0.4)
				grad := e.tensor([]int{n}, g)
				e.ok(ok.AdamWStep(param, grad, expAvg, expAvgSq, p), "AdamWStep %s", name)
				refAdamW(w, g, m, v, p)
				e.near("AdamW param "+name, e.read(param), f64(w))
				e.near("AdamW exp_avg "+name, e.read(expAvg), f64(m))
				e.near("AdamW exp_avg_sq "+name, e.read(expAvgSq), f64(v))
			}
		}
	}
}
