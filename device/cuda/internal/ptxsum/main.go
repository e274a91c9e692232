// Command ptxsum records what the committed PTX was compiled from
// (kernels/ptx.sum; Note [PTX sums] in device/cuda/kernels/ptxsum.go).
// `go generate ./device/cuda` runs it right after nvcc, in device/cuda.
package main

import (
	"log"
	"os"
	"path/filepath"

	"ferry/device/cuda/kernels"
)

func main() {
	src, err := os.ReadFile("ptx.go")
	if err != nil {
		log.Fatal(err)
	}
	command, err := kernels.GenerateCommand(src)
	if err != nil {
		log.Fatal(err)
	}
	files, err := kernels.ReadSources("kernels")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("kernels", kernels.PTXSumFile), kernels.PTXSum(files, command), 0o644); err != nil {
		log.Fatal(err)
	}
}
