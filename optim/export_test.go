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
