//go:build !amd64 || purego

package gemm

func registerArch() {}
