package cpu

import (
	"fmt"

	"ferry/device"
)

// kernels implements device.Kernels on the caller's goroutine.
type kernels struct{}

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
