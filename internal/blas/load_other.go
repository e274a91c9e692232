//go:build !((darwin || freebsd || netbsd || (linux && (386 || amd64 || arm || arm64 || loong64 || ppc64le || riscv64))) && !android && !faketime)

package blas

import (
	"runtime"
	"unsafe"
)

func load() {
	reason = "native BLAS loading (purego Dlopen) is not supported on " + runtime.GOOS + "/" + runtime.GOARCH
}

func getThreads() int     { return 0 }
func setThreads(int) bool { return false }

func sgemm(transA, transB bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, beta float32, c unsafe.Pointer, ldc int) {
	panic("unreachable: " + reason)
}

// Referenced by the tests.
var (
	fortranSgemm uintptr
	forceCBLAS   bool
)
