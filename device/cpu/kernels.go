package cpu

import (
	"fmt"

	"ferry/device"
)

// kernels implements device.Kernels on the caller's goroutine.
type kernels struct{}

// Kernels returns the CPU device's kernels (every optional family it
// implements included). They run on the caller's goroutine over any block
// whose segment implements Segment, whoever manages it: a block of a CPU
// device, or a device.ForeignBlock over memory of another driver's. The
// fake CUDA driver (device/cuda/fake) runs its launches through them, so
// that the CPU device's kernels are the one Go version of every kernel.
func Kernels() device.Kernels { return &kernels{} }

func (k *kernels) Upload(dst device.View, src []byte) error {
	b := Bytes(dst.Block)[dst.Off*dst.DType.Size():]
	if len(src) > len(b) {
		return fmt.Errorf("cpu: upload of %d bytes into %d", len(src), len(b))
	}
	copy(b, src)
	return nil
}

func (k *kernels) Download(dst []byte, src device.View) error {
	b := Bytes(src.Block)[src.Off*src.DType.Size():]
	if len(dst) > len(b) {
		return fmt.Errorf("cpu: download of %d bytes from %d", len(dst), len(b))
	}
	copy(dst, b)
	return nil
}
