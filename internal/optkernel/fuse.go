//go:build amd64.v3

package optkernel

// goFuses: the compiler fuses x*y+z into one rounding (Note [host bits]).
const goFuses = true
