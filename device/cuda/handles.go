package cuda

import (
	"fmt"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// StreamHandle returns the CUstream behind s, a stream of a CUDA device
// (its Compute() or one from NewStream), for libraries that enqueue work on
// it themselves, as NCCL (ferry/dist/nccl) does. Work they enqueue is
// ordered with the device's own as any work on s is: record an event on s
// after it to know when it has finished. The handle lives as long as the
// device.
func StreamHandle(s device.Stream) (cu.Stream, error) {
	st, ok := s.(*stream)
	if !ok {
		return 0, fmt.Errorf("cuda: StreamHandle: %T is not a stream of a CUDA device", s)
	}
	if st.d.closed.Load() {
		return 0, fmt.Errorf("%s: StreamHandle of stream %s: %w", st.d.name, st.name, device.ErrClosed)
	}
	return st.h, nil
}

// DevicePointer returns the device address of sp, a span of d's own
// memory (not of its pinned host pool), for libraries that read or write
// it themselves (NCCL). The caller keeps the block alive, and tells the
// allocator of any stream that uses it (Allocator().RecordStream), until
// that work has finished.
func (d *Device) DevicePointer(sp device.Span) (cu.DevicePtr, error) {
	p, err := d.locate(sp.Block, sp.Off, sp.Len)
	if err != nil {
		return 0, err
	}
	if !p.dev {
		return 0, fmt.Errorf("%s: DevicePointer: the span is in host memory", d.name)
	}
	return p.ptr, nil
}
