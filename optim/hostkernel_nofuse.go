//go:build !amd64.v3

package optim

// goFuses: the compiler rounds every product (Note [host bits]).
const goFuses = false
