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
