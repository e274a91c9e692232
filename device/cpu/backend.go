package cpu

import (
	"fmt"
	"sync/atomic"

	"ferry/internal/blas"
)

// matmulMode chooses the matrix-product library for every CPU device of the
// process: 0 auto (OpenBLAS when loaded), 1 pure Go, 2 OpenBLAS.
var matmulMode atomic.Int32

// SetMatmulBackend chooses which library runs matrix products, for every CPU
// device of the process: "go" forces the pure-Go kernel, "blas" requires
// OpenBLAS (an error when it cannot be loaded), "auto" (the default) uses
// OpenBLAS when it is loaded. Tests use it to run both paths in one process;
// FERRY_BLAS=off, read once per process, still forbids OpenBLAS. It is safe
// to call at any time; a batched product running meanwhile may use both.
func SetMatmulBackend(name string) error {
	switch name {
	case "auto", "":
		matmulMode.Store(0)
	case "go":
		matmulMode.Store(1)
	case "blas":
		if !blas.Available() {
			return fmt.Errorf("cpu: no native BLAS: %s", blas.Reason())
		}
		matmulMode.Store(2)
	default:
		return fmt.Errorf("cpu: unknown matmul backend %q (known: auto, go, blas)", name)
	}
	return nil
}

func useBLAS() bool { return matmulMode.Load() != 1 && blas.Available() }
