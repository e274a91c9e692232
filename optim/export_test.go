package optim

// HostISAs lists the host optimizer's loops this machine runs.
var HostISAs = hostISAs

// SetHostISA makes the host optimizer run isa's loops until the returned
// function is called.
func SetHostISA(isa string) (restore func()) {
	old := hostISA
	hostISA = isa
	return func() { hostISA = old }
}
