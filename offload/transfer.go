package offload

import (
	"errors"
	"time"

	"ferry"
	"ferry/device"
)

// The life of a record: on the device, copying out, off the device (host
// memory or a file), copying back, on the device again; and the reaping,
// waiting and prefetching that move it along. Everything here runs on the
// training goroutine; copies run on the device's side streams and file I/O
// on the disk goroutine (disk.go).

type recState uint8

const (
	onDevice   recState = iota // data on the device, in r.dev
	copyingOut                 // a copy off the device is in flight; r.dev still valid
	offDevice                  // data only on the host or disk
	copyingIn                  // a copy back is in flight into r.dev
)

// record is one storage that left (or will leave) the device; the packed
// values of every saved view of it point here.
type record struct {
	key     any
	index   int // in o.order
	bytes   int64
	dtype   device.DType
	refs    int // packed values not yet released
	state   recState
	tier    Placement     // Host or Disk once chosen
	dev     *ferry.Tensor // handle on the device data while the offloader holds it
	weak    ferry.WeakRef // the original device data, which others may still hold
	host    *device.Block // host tier copy, or staging for disk on a device without host-addressable memory
	file    *diskFile
	out     device.Event // copy off the device (host tier, or to staging)
	outIO   *ioOp        // disk write
	in      device.Event // copy back to the device
	inIO    *ioOp        // disk read (and, with staging, the copy after it)
	needed  bool         // backward has asked for it
	dropped bool
	err     error // a failed transfer; backward reports it
}

// tierFor chooses where r goes.
func (o *Offloader) tierFor(r *record) Placement {
	switch r.tier {
	case Host, Disk: // pack refused Disk without a disk tier
		return r.tier
	}
	if o.cfg.HostLimit == 0 || o.cfg.HostLimit > 0 && o.hostBytes+r.bytes <= o.cfg.HostLimit {
		return Host
	}
	if o.disk != nil {
		return Disk
	}
	return Keep
}

// moveOut starts the copy of r off the device, unless a handle outside the
// tape holds the storage: then the copy would free nothing until backward
// (the caller keeps the step's input batch), and r stays.
func (o *Offloader) moveOut(r *record) {
	if r.dev.OutsideHandles() > 0 {
		r.tier = Keep
		o.stats.HeldOutside++
		return
	}
	r.tier = o.tierFor(r)
	if r.tier == Keep {
		return
	}
	for len(o.inFlight) >= o.cfg.MaxInFlight {
		o.waitOldest()
	}
	block, _ := r.dev.Block()
	src := device.Whole(block)
	direct := hostAddressable(block)
	if r.tier == Host || !direct {
		hb, err := o.host.Allocator().Alloc(r.bytes, device.Activation)
		if err != nil {
			// No host memory: keep the tensor where it is, note why.
			r.err = nil
			r.tier = Keep
			return
		}
		r.host = hb
		o.d2h.Wait(o.dev.Compute().Record()) // the producer's kernels first
		if err := o.dev.Copy(o.d2h, device.Whole(hb), src); err != nil {
			r.err = err
			return
		}
		r.out = o.d2h.Record()
	}
	r.state = copyingOut
	if r.tier == Host {
		o.hostBytes += r.bytes
		o.stats.HostPeakBytes = max(o.stats.HostPeakBytes, o.hostBytes)
		o.stats.BytesToHost += r.bytes
	} else {
		if sim, ok := o.dev.(diskSimulator); ok && !device.HasData(o.dev) {
			r.out = sim.SimulateDisk(r.bytes, true, r.out)
		} else {
			o.startDiskWrite(r, src, direct)
		}
		o.diskBytes += r.bytes
		o.stats.DiskPeakBytes = max(o.stats.DiskPeakBytes, o.diskBytes)
		o.trimSpares()
		o.stats.BytesToDisk += r.bytes
	}
	o.stats.Offloaded++
	o.inFlight = append(o.inFlight, r)
	if o.earlyFree {
		r.dev.Release()
		r.dev = nil
	}
}

// outDone reports whether r's copy off the device has finished.
func (r *record) outDone() bool {
	if r.out != nil && !r.out.Done() {
		return false
	}
	return r.outIO == nil || r.outIO.done()
}

// reap finishes the copies off the device that are done: their device
// tensors are released (unless backward already wants them back).
func (o *Offloader) reap() {
	kept := o.inFlight[:0]
	for _, r := range o.inFlight {
		if r.outDone() {
			o.finishOut(r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(o.inFlight[len(kept):])
	o.inFlight = kept
}

// waitOldest blocks until the oldest copy in flight finishes.
func (o *Offloader) waitOldest() {
	r := o.inFlight[0]
	start := time.Now()
	if r.out != nil {
		if err := r.out.Synchronize(); err != nil && r.err == nil {
			r.err = err
		}
	}
	if r.outIO != nil {
		r.outIO.wait()
	}
	o.stats.StallSeconds += time.Since(start).Seconds()
	o.reap()
}

func (o *Offloader) finishOut(r *record) {
	if r.out != nil {
		if err := r.out.Synchronize(); err != nil && r.err == nil {
			r.err = err
		}
		r.out = nil
	}
	if r.outIO != nil {
		if r.outIO.err != nil && r.err == nil {
			r.err = r.outIO.err
		}
		r.takeFile()
		r.outIO = nil
	}
	if r.tier == Disk && r.host != nil { // staging no longer needed
		o.host.Allocator().Free(r.host)
		r.host = nil
	}
	if r.err != nil {
		// The data did not get out whole: keep the device copy, which is
		// intact, and let backward report the failure.
		r.state = onDevice
		return
	}
	if r.needed && r.dev != nil {
		// Backward took the data while it was still being copied: it stays.
		r.state = onDevice
		return
	}
	r.state = offDevice
	if r.dev != nil {
		// The device memory is freed now, or when the last other holder
		// lets go: exactly when it would be without offloading.
		r.dev.Release()
		r.dev = nil
	}
}

// bringBack makes r's data available on the device, waiting if it must,
// and reports whether it had to: the data was not back (or on its way back)
// in time.
func (o *Offloader) bringBack(r *record) (waited bool, err error) {
	if r.state == offDevice && !o.resident(r) {
		if err := o.startIn(r); err != nil {
			return true, err
		}
		waited = true
	}
	if r.state != copyingIn {
		if r.dev == nil { // earlyFree in tests: the data is gone
			return waited, errors.New("device copy released early")
		}
		return waited, nil
	}
	if !o.inReady(r) {
		waited = true
		start := time.Now()
		if r.inIO != nil {
			r.inIO.wait()
		}
		o.stats.StallSeconds += time.Since(start).Seconds()
	}
	if r.inIO != nil {
		if r.inIO.err != nil {
			return true, r.inIO.err
		}
		if ev, ok := r.inIO.result.(device.Event); ok {
			r.in = ev
		}
		r.inIO = nil
	}
	if r.in != nil {
		if !r.in.Done() {
			start := time.Now()
			o.dev.Compute().Wait(r.in) // compute waits on the event, never a poll
			o.stats.StallSeconds += time.Since(start).Seconds()
		}
		r.in = nil
	}
	if r.tier == Disk && r.host != nil { // staging, reusable once the copy has passed
		o.host.Allocator().RecordStream(r.host, o.h2d)
		o.host.Allocator().Free(r.host)
		r.host = nil
	}
	r.state = onDevice
	return waited, nil
}

func (o *Offloader) inReady(r *record) bool {
	if r.inIO != nil && !r.inIO.done() {
		return false
	}
	if r.inIO != nil {
		if ev, ok := r.inIO.result.(device.Event); ok && !ev.Done() {
			return false
		}
	}
	return r.in == nil || r.in.Done()
}

// resident takes the original device data back when someone else kept it
// alive all along, so nothing needs copying.
func (o *Offloader) resident(r *record) bool {
	if r.dev != nil {
		panic("offload: record off the device still holds a device tensor")
	}
	t := r.weak.Get()
	if t == nil {
		return false
	}
	r.dev = t
	r.state = onDevice
	if r.tier == Host && r.host != nil {
		o.host.Allocator().Free(r.host)
		r.host = nil
		o.hostBytes -= r.bytes
	}
	return true
}

// startIn starts bringing r back to the device.
func (o *Offloader) startIn(r *record) error {
	block, err := o.dev.Allocator().Alloc(r.bytes, device.Activation)
	if err != nil {
		return err
	}
	n := int(r.bytes) / r.dtype.Size()
	r.dev = ferry.Wrap(o.dev, block, r.dtype, []int{n}, []int{1}, 0)
	dst := device.Whole(block)
	// The new block may have been used by compute work not yet finished.
	o.h2d.Wait(o.dev.Compute().Record())
	if r.tier == Host {
		if err := o.dev.Copy(o.h2d, dst, device.Whole(r.host)); err != nil {
			return err
		}
		r.in = o.h2d.Record()
		o.host.Allocator().RecordStream(r.host, o.h2d)
		o.host.Allocator().Free(r.host) // reusable once the copy has passed
		r.host = nil
		o.hostBytes -= r.bytes
		o.stats.BytesFromHost += r.bytes
	} else {
		if sim, ok := o.dev.(diskSimulator); ok && !device.HasData(o.dev) {
			hb, err := o.host.Allocator().Alloc(r.bytes, device.Activation)
			if err != nil {
				return err
			}
			r.host = hb
			o.h2d.Wait(sim.SimulateDisk(r.bytes, false, nil))
			if err := o.dev.Copy(o.h2d, dst, device.Whole(hb)); err != nil {
				return err
			}
			r.in = o.h2d.Record()
		} else if err := o.startDiskRead(r, dst); err != nil {
			return err
		}
		o.stats.BytesFromDisk += r.bytes
	}
	r.state = copyingIn
	return nil
}

// prefetchBefore starts bringing back the offloaded records saved before r,
// up to the lookahead.
func (o *Offloader) prefetchBefore(r *record) {
	count := 0
	var bytes int64
	for i := r.index - 1; i >= 0 && count < o.cfg.Lookahead; i-- {
		q := o.order[i]
		if q == nil || q.dropped || q.tier == Keep || q.tier == Auto {
			continue
		}
		if q.state == onDevice && q.dev != nil && !q.needed {
			continue // never left
		}
		if o.cfg.LookaheadBytes > 0 && bytes+q.bytes > o.cfg.LookaheadBytes && count > 0 {
			break
		}
		count++
		bytes += q.bytes
		if q.state == offDevice && q.err == nil && !o.resident(q) {
			if err := o.startIn(q); err != nil {
				q.err = err
			}
		}
	}
}

// drop lets go of everything r holds. It waits for transfers still using
// r's memory.
func (o *Offloader) drop(r *record) error {
	if r.dropped {
		return nil
	}
	r.dropped = true
	if r.out != nil {
		_ = r.out.Synchronize()
	}
	if r.outIO != nil {
		r.outIO.wait()
	}
	if r.inIO != nil {
		r.inIO.wait()
		if ev, ok := r.inIO.result.(device.Event); ok {
			_ = ev.Synchronize()
		}
	}
	if r.in != nil {
		_ = r.in.Synchronize()
	}
	if r.dev != nil {
		r.dev.Release()
		r.dev = nil
	}
	if r.host != nil {
		o.host.Allocator().Free(r.host)
		r.host = nil
		if r.tier == Host {
			o.hostBytes -= r.bytes
		}
	}
	var err error
	if r.outIO != nil {
		r.takeFile()
		r.outIO = nil
	}
	if r.file != nil {
		o.diskBytes -= r.bytes
		if r.inIO == nil || r.inIO.err == nil {
			o.keepSpare(r.file, r.bytes)
		} else {
			err = r.file.close()
		}
		r.file = nil
	}
	delete(o.records, r.key)
	if r.index < len(o.order) && o.order[r.index] == r {
		o.order[r.index] = nil
	}
	for i, q := range o.inFlight {
		if q == r {
			o.inFlight = append(o.inFlight[:i], o.inFlight[i+1:]...)
			break
		}
	}
	o.live--
	if o.live == 0 {
		clear(o.queue)
		o.queue = o.queue[:0]
	}
	return err
}

// diskSimulator is a device without data that accounts disk transfers in
// its simulated time instead (the meta device).
type diskSimulator interface {
	SimulateDisk(n int64, write bool, after device.Event) device.Event
}

// hostAddressable reports whether a device block's bytes can be read and
// written by the process directly (the CPU device), so the disk tier can
// skip the staging copy.
func hostAddressable(b *device.Block) bool {
	_, ok := b.Segment().(interface{ Bytes() []byte })
	return ok
}

func blockBytes(b *device.Block) []byte {
	seg := b.Segment().(interface{ Bytes() []byte }).Bytes()
	return seg[b.Offset() : b.Offset()+b.Requested()]
}
