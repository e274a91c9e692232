package offload

import (
	"time"

	"ferry"
	"ferry/device"
)

// HostSaver does what PyTorch's torch.autograd.graph.save_on_cpu(
// pin_memory=True) does, for comparison: Pack copies every saved tensor
// (parameters included, and each save apart, even two saves of one tensor)
// to the device's host memory and waits for the copy; Unpack copies it back
// to the device when backward asks. It frees device memory, but every copy
// stalls compute and nothing is prefetched. The Offloader does better.
type HostSaver struct {
	dev   device.Device
	stats Stats
	hooks *ferry.SavedTensorHooks
}

// NewHostSaver makes a HostSaver for tensors on dev.
func NewHostSaver(dev device.Device) *HostSaver {
	s := &HostSaver{dev: dev}
	host := dev.Host()
	s.hooks = &ferry.SavedTensorHooks{
		Pack: func(t *ferry.Tensor, info ferry.SaveInfo) any {
			if t.Device() != dev {
				t.Release()
				panic(otherDevice("save-on-host", info, t, dev))
			}
			start := time.Now()
			h := t.To(host) // synchronous
			t.Release()
			s.stats.SavedTensors++
			s.stats.Offloaded++
			s.stats.BytesToHost += h.Bytes()
			s.stats.StallSeconds += time.Since(start).Seconds()
			return &hostCopy{host: h, dev: dev}
		},
		Unpack: func(p any) (*ferry.Tensor, error) {
			c := p.(*hostCopy)
			if c.back == nil {
				start := time.Now()
				if err := ferry.Catch(func() error { c.back = c.host.To(c.dev); return nil }); err != nil {
					return nil, err
				}
				s.stats.BytesFromHost += c.host.Bytes()
				s.stats.Waited++
				s.stats.StallSeconds += time.Since(start).Seconds()
			}
			return c.back, nil
		},
	}
	return s
}

// Hooks returns the hooks to push on a tape.
func (s *HostSaver) Hooks() *ferry.SavedTensorHooks { return s.hooks }

// Stats returns what the saver moved; every copy counts as a stall, since
// compute waits for each.
func (s *HostSaver) Stats() Stats { return s.stats }

// hostCopy is what HostSaver keeps of a saved tensor.
type hostCopy struct {
	host *ferry.Tensor // on the host
	back *ferry.Tensor // on the device again, once unpacked
	dev  device.Device
}

func (c *hostCopy) Release() {
	c.host.Release()
	c.back.Release()
}
