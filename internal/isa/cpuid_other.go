//go:build !amd64 || !gc

package isa

// detect leaves every fact false: off amd64 ferry has no x86 assembly to
// run.
func detect() {}
