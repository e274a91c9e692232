//go:build !amd64.v3

package optkernel

// goFuses: the compiler rounds every product (Note [host bits]).
const goFuses = false
