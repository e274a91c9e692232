// Package optkernel is the optimizers' arithmetic over Go slices: AdamW
// and SGD updates, vectorised on amd64 (AVX-512 or AVX2, kernel_amd64.s,
// written by gen.go), Go elsewhere and on the remainders. The host
// optimizer (optim.OnHost) runs them spread over the cores (AdamW, SGD);
// the CPU device runs them on its own pool's chunks (AdamWSerial,
// SGDSerial), so both give the same bits.
package optkernel

import (
	"math"
	"runtime"
	"sync"

	"ferry/device"
)

// Note [host bits]. The vector loops compute the bits of the Go loops
// (adamwGo, sgdGo): the same float32 operations in the same order. A
// compiler that fuses multiply-adds (amd64 with GOAMD64=v3 or above,
// arm64) fuses some of the Go loops' operations, so the assembly comes in
// two kinds: one rounds every operation, as Go does by default (GOAMD64=v1,
// v2); the other (the FMA variants) fuses exactly the multiply-adds that
// Go 1.26 fuses in the Go loops under GOAMD64=v3, chosen by the amd64.v3
// build tag (goFuses). Which ones Go fuses is the compiler's choice: run
// `GOAMD64=v3 go test ./internal/optkernel` after a Go upgrade, which
// checks the vector loops against the Go ones. Square root is correctly
// rounded in both (VSQRTPS equals float32(math.Sqrt(float64(x)))), and
// division is IEEE division, so a lane computes what the scalar code does.

// adamConsts are one AdamW step's per-element constants, in the order the
// assembly reads them.
type adamConsts struct {
	decay, beta1, omb1, beta2, omb2, bc2Sqrt, eps, negStep float32
}

// newAdamConsts derives one step's constants from p.
func newAdamConsts(p device.AdamWParams) adamConsts {
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	stepSize := float32(float64(p.LR) / bc1)
	return adamConsts{
		decay:   1 - p.LR*p.WeightDecay,
		beta1:   p.Beta1,
		omb1:    1 - p.Beta1,
		beta2:   p.Beta2,
		omb2:    1 - p.Beta2,
		bc2Sqrt: float32(math.Sqrt(bc2)),
		eps:     p.Eps,
		negStep: -stepSize,
	}
}

// ISA names the loops AdamW runs: "avx512", "avx2" or "go".
// Tests and benchmarks set it to compare the paths; it is otherwise the
// best the CPU has (kernel_amd64.go).
var ISA = bestISA()

// hostGrain is the fewest elements a core is given: below it, one core
// updates a parameter alone (waking another costs more than it saves).
const hostGrain = 1 << 15

// hostParallel runs body over [0, n) in at most GOMAXPROCS chunks of at
// least hostGrain elements, each a multiple of 64 elements long but the
// last, the first on the caller's goroutine. Elementwise updates give the
// same bits however they are cut.
func hostParallel(n int, body func(lo, hi int)) { Parallel(n, 1, body) }

// Parallel runs body over [0, n) as hostParallel does, each chunk
// starting at a multiple of grain (a quantisation block) as well as of 64:
// what the host optimizer runs any optimizer's update on.
func Parallel(n, grain int, body func(lo, hi int)) {
	align := 64
	if grain > 1 {
		align = grain * 64 / gcd(grain, 64)
	}
	chunks := min(n/hostGrain, runtime.GOMAXPROCS(0))
	if chunks <= 1 {
		body(0, n)
		return
	}
	chunk := ((n+chunks-1)/chunks + align - 1) / align * align
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		wg.Go(func() { body(lo, min(lo+chunk, n)) })
	}
	body(0, min(chunk, n))
	wg.Wait()
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// AdamW updates w, m and v (all of g's length) from g: one AdamW step,
// spread over the cores.
func AdamW(w, g, m, v []float32, p device.AdamWParams) {
	c := newAdamConsts(p)
	n := len(g)
	w, m, v = w[:n], m[:n], v[:n]
	hostParallel(n, func(lo, hi int) { adamwRange(w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], &c) })
}

// adamwRange runs the vector loop over the longest prefix it takes and Go
// over the rest.
func adamwRange(w, g, m, v []float32, c *adamConsts) {
	var k int
	switch {
	case ISA == "avx512" && len(w) >= 16:
		k = len(w) &^ 15
		if goFuses {
			adamwFMAAVX512(&w[0], &g[0], &m[0], &v[0], k, c)
		} else {
			adamwAVX512(&w[0], &g[0], &m[0], &v[0], k, c)
		}
	case ISA == "avx2" && len(w) >= 8:
		k = len(w) &^ 7
		if goFuses {
			adamwFMAAVX2(&w[0], &g[0], &m[0], &v[0], k, c)
		} else {
			adamwAVX2(&w[0], &g[0], &m[0], &v[0], k, c)
		}
	}
	adamwGo(w[k:], g[k:], m[k:], v[k:], c)
}

// adamwGo is the AdamW update, the reference of the vector loops (Note
// [host bits]).
func adamwGo(w, g, m, v []float32, c *adamConsts) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	decay, beta1, beta2, eps := c.decay, c.beta1, c.beta2, c.eps
	bc2Sqrt, stepSize := c.bc2Sqrt, -c.negStep
	for i := range w {
		w[i] *= decay
		m[i] = m[i]*beta1 + g[i]*(1-beta1)
		v[i] = v[i]*beta2 + (1-beta2)*g[i]*g[i]
		denom := float32(math.Sqrt(float64(v[i])))/bc2Sqrt + eps
		w[i] += -stepSize * m[i] / denom
	}
}

// sgdConsts are one SGD step's constants, in the order the assembly
// reads them.
type sgdConsts struct{ negLR, wd, mom, omd float32 }

// The SGD loops' flags: which of the device loop's branches run.
const (
	sgdWD       = 1 << iota // WeightDecay ≠ 0
	sgdMomentum             // Momentum ≠ 0
	sgdFirst                // the momentum buffer's first step
	sgdNesterov
)

// AdamWSerial is AdamW on the calling goroutine alone.
func AdamWSerial(w, g, m, v []float32, p device.AdamWParams) {
	c := newAdamConsts(p)
	n := len(g)
	adamwRange(w[:n], g, m[:n], v[:n], &c)
}

// newSGD derives one step's constants and flags from p.
func newSGD(p device.SGDParams) (sgdConsts, int) {
	c := sgdConsts{negLR: -p.LR, wd: p.WeightDecay, mom: p.Momentum, omd: 1 - p.Dampening}
	flags := 0
	if p.WeightDecay != 0 {
		flags |= sgdWD
	}
	if p.Momentum != 0 {
		flags |= sgdMomentum
		if p.First {
			flags |= sgdFirst
		}
		if p.Nesterov {
			flags |= sgdNesterov
		}
	}
	return c, flags
}

// SGDSerial is SGD on the calling goroutine alone.
func SGDSerial(w, g, buf []float32, p device.SGDParams) {
	n := len(g)
	c, flags := newSGD(p)
	if flags&sgdMomentum != 0 {
		buf = buf[:n]
	}
	sgdRange(w[:n], g, buf, &c, flags, p)
}

// SGD updates w (and buf, when p.Momentum ≠ 0) from g: one SGD step,
// spread over the cores.
func SGD(w, g, buf []float32, p device.SGDParams) {
	n := len(g)
	w = w[:n]
	c, flags := newSGD(p)
	if flags&sgdMomentum != 0 {
		buf = buf[:n]
	}
	hostParallel(n, func(lo, hi int) {
		var b []float32
		if buf != nil {
			b = buf[lo:hi]
		}
		sgdRange(w[lo:hi], g[lo:hi], b, &c, flags, p)
	})
}

// sgdRange runs the vector loop over the longest prefix it takes and Go
// over the rest.
func sgdRange(w, g, buf []float32, c *sgdConsts, flags int, p device.SGDParams) {
	var k int
	var bp *float32
	switch {
	case ISA == "avx512" && len(w) >= 16:
		k = len(w) &^ 15
	case ISA == "avx2" && len(w) >= 8:
		k = len(w) &^ 7
	}
	if k > 0 {
		if flags&sgdMomentum != 0 {
			bp = &buf[0]
		}
		switch {
		case ISA == "avx512" && goFuses:
			sgdFMAAVX512(&w[0], &g[0], bp, k, c, flags)
		case ISA == "avx512":
			sgdAVX512(&w[0], &g[0], bp, k, c, flags)
		case goFuses:
			sgdFMAAVX2(&w[0], &g[0], bp, k, c, flags)
		default:
			sgdAVX2(&w[0], &g[0], bp, k, c, flags)
		}
	}
	if flags&sgdMomentum != 0 {
		buf = buf[k:]
	}
	sgdGo(w[k:], g[k:], buf, p)
}

// sgdGo is the SGD update (PyTorch's torch.optim.SGD), the reference of
// the vector loops (Note [host bits]).
func sgdGo(w, g, buf []float32, p device.SGDParams) {
	g = g[:len(w)]
	if p.Momentum == 0 && p.WeightDecay == 0 { // plain SGD: w += -lr·g
		alpha := -p.LR
		for i, x := range g {
			q := alpha * x
			w[i] += q
		}
		return
	}
	for i := range w {
		d := g[i]
		if p.WeightDecay != 0 {
			d += p.WeightDecay * w[i]
		}
		if p.Momentum != 0 {
			if p.First {
				buf[i] = d
			} else {
				buf[i] = buf[i]*p.Momentum + (1-p.Dampening)*d
			}
			if p.Nesterov {
				d += p.Momentum * buf[i]
			} else {
				d = buf[i]
			}
		}
		w[i] += -p.LR * d
	}
}
