//go:build amd64 && gc && !darwin

package isa

// osSavesZMM reports whether XCR0 shows the system saving the opmask
// registers and all of ZMM.
func osSavesZMM(xcr0 uint32) bool { return xcr0&xcr0ZMM == xcr0ZMM }
