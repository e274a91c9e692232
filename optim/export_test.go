package optim

import "ferry/internal/optkernel"

// HostISAs lists the host optimizer's loops this machine runs.
var HostISAs = optkernel.ISAs

// SetHostISA makes the host optimizer run isa's loops until the returned
// function is called.
func SetHostISA(isa string) (restore func()) {
	old := optkernel.ISA
	optkernel.ISA = isa
	return func() { optkernel.ISA = old }
}

// SetUpdatePath forces one path of Note [update paths] on e: "kernel",
// "loop", "tensors" or "copy" ("" for the automatic choice).
func SetUpdatePath(e *Engine, path string) {
	e.path = map[string]int{"": pathAuto, "kernel": pathKernel, "loop": pathLoop, "tensors": pathTensors, "copy": pathCopy}[path]
}

// EngineOf is the Engine under an optimizer of this package.
func (e *Engine) EngineOf() *Engine { return e }

// Quantize is AdamW8bit's quantisation of x on the signed (or unsigned)
// map; QuantizeSearch the binary search it must equal.
func Quantize(x float32, signed bool) uint8 {
	qs, qu := quantMaps()
	if signed {
		return qs.quantize(x)
	}
	return qu.quantize(x)
}

func QuantizeSearch(x float32, signed bool) uint8 {
	qs, qu := quantMaps()
	q := &qu.q
	if signed {
		q = &qs.q
	}
	c := 0
	if x >= q[128] {
		c = 128
	}
	for s := 64; s >= 1; s >>= 1 {
		if x >= q[c+s] {
			c += s
		}
	}
	if c < 255 && x-q[c] >= (q[c+1]-q[c])*0.5 {
		c++
	}
	return uint8(c)
}

// QuantMapValue is the map's value of code c.
func QuantMapValue(c uint8, signed bool) float32 {
	qs, qu := quantMaps()
	if signed {
		return qs.q[c]
	}
	return qu.q[c]
}
