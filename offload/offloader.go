// Package offload moves the tensors that autograd saves for backward off the
// device during forward and brings them back, ahead of need, during
// backward. It is a client of ferry's saved-tensor hooks: push an
// Offloader's Hooks on a tape and every tensor saved while they are pushed
// goes through it; autograd knows nothing of offloading.
//
//	off, err := offload.New(dev, offload.DefaultConfig())
//	defer off.Close()
//	ferry.Step(func(tape *ferry.Tape) error {
//		x := tape.Adopt(batch)
//		var y *ferry.Tensor
//		tape.WithHooks(off.Hooks(), func() { y = model.Forward(x) })
//		return nn.MSELoss(y, target).Backward()
//	})
//
// Two tiers take what leaves the device: host memory (a reusable pool,
// pinned on a GPU) and, beyond a host budget, files on disk. SaveOnHost is
// the simple synchronous alternative PyTorch offers, kept for comparison.
package offload

import (
	"errors"
	"fmt"
	"os"
	"time"

	"ferry"
	"ferry/device"
	"ferry/internal/workq"
)

// Placement is where a saved tensor's data spends the time between forward
// and backward.
type Placement uint8

const (
	// Auto offloads unless a default rule keeps the tensor (a parameter,
	// under MinBytes, among the last KeepLast), to the host while it is
	// under HostLimit and to disk beyond.
	Auto Placement = iota
	Keep           // stays on the device
	Host           // goes to host memory, whatever the budget
	Disk           // goes to disk (needs DiskDir)
)

var placementNames = []string{"auto", "keep", "host", "disk"}

func (p Placement) String() string { return placementNames[p] }

// ParsePlacement is the inverse of String.
func ParsePlacement(s string) (Placement, error) {
	for i, n := range placementNames {
		if n == s {
			return Placement(i), nil
		}
	}
	return 0, fmt.Errorf("unknown placement %q (want auto, keep, host or disk)", s)
}

// Config tunes an Offloader. DefaultConfig gives good defaults; the zero
// value means the numbers literally (no lookahead is an error).
type Config struct {
	// MinBytes: tensors smaller than this stay on the device; moving them
	// costs more than it saves.
	MinBytes int64
	// KeepLast: the most recently saved storages (this many) are not
	// moved until later ones are saved, so the last ones of forward, which
	// backward needs first, never leave. It applies to tensors placed
	// Auto; a Policy's Host or Disk moves a tensor as soon as it can.
	KeepLast int
	// MaxInFlight bounds copies off the device that have started and not
	// finished; saving waits for the oldest beyond it. Device memory held
	// by copies in flight is at most this many tensors.
	MaxInFlight int
	// Lookahead is how many offloaded tensors backward brings back ahead
	// of the one it needs now; LookaheadBytes, if positive, bounds their
	// bytes as well.
	Lookahead      int
	LookaheadBytes int64
	// HostLimit bounds the host memory the host tier holds at once:
	// 0 means no limit, a negative value means none at all (everything
	// that leaves the device goes to disk). Beyond it tensors go to disk
	// if DiskDir is set, else stay on the device.
	HostLimit int64
	// DiskDir is where the disk tier writes its files; "" turns the tier
	// off. Files are unlinked as soon as they are created, so they vanish
	// with the process however it ends.
	DiskDir string
	// Policy, if set, decides per saved tensor; Auto defers to the rules
	// above. Parameters are always kept.
	Policy func(info ferry.SaveInfo, t *ferry.Tensor) Placement
}

// DefaultConfig: 1 KiB floor, keep the last saved storage, two copies in
// flight, two tensors of lookahead, host memory without limit, no disk.
func DefaultConfig() Config {
	return Config{MinBytes: 1 << 10, KeepLast: 1, MaxInFlight: 2, Lookahead: 2}
}

// Stats describe what an Offloader did since it was made (or since
// ResetStats).
type Stats struct {
	SavedTensors int `json:"saved_tensors"` // tensors autograd saved through the hooks
	Kept         int `json:"kept"`          // of those, left on the device by policy
	Deduplicated int `json:"deduplicated"`  // of those, sharing storage with one already packed
	Offloaded    int `json:"offloaded"`     // distinct storages moved off the device

	BytesToHost   int64 `json:"bytes_to_host"`
	BytesToDisk   int64 `json:"bytes_to_disk"`
	BytesFromHost int64 `json:"bytes_from_host"`
	BytesFromDisk int64 `json:"bytes_from_disk"`
	HostPeakBytes int64 `json:"host_peak_bytes"` // most held on the host tier at once
	DiskPeakBytes int64 `json:"disk_peak_bytes"`

	// Ready counts offloaded tensors that were back on the device when
	// backward asked for them; Waited those backward had to wait for.
	Ready  int `json:"ready"`
	Waited int `json:"waited"`
	// StallSeconds is the time the training goroutine spent waiting for
	// transfers: for a copy slot in forward and for data in backward.
	StallSeconds float64 `json:"stall_seconds"`
}

// Since returns the statistics accumulated after earlier was taken (peaks
// are kept as they are).
func (s Stats) Since(earlier Stats) Stats {
	d := s
	d.SavedTensors -= earlier.SavedTensors
	d.Kept -= earlier.Kept
	d.Deduplicated -= earlier.Deduplicated
	d.Offloaded -= earlier.Offloaded
	d.BytesToHost -= earlier.BytesToHost
	d.BytesToDisk -= earlier.BytesToDisk
	d.BytesFromHost -= earlier.BytesFromHost
	d.BytesFromDisk -= earlier.BytesFromDisk
	d.Ready -= earlier.Ready
	d.Waited -= earlier.Waited
	d.StallSeconds -= earlier.StallSeconds
	return d
}

// OverlapRatio is the share of offloaded tensors that were back before
// backward needed them (1 when none were needed).
func (s Stats) OverlapRatio() float64 {
	if s.Ready+s.Waited == 0 {
		return 1
	}
	return float64(s.Ready) / float64(s.Ready+s.Waited)
}

// Offloader is a saved-tensor hooks implementation that moves activations
// to host memory or disk on side streams and prefetches them during
// backward.
//
// All its methods run on the training goroutine (hooks are called there);
// copies run on the device's side streams and disk I/O on a goroutine of
// the Offloader's. Device tensors are only ever released on the training
// goroutine, when the copy that reads them is known to have finished.
type Offloader struct {
	cfg  Config
	dev  device.Device
	host device.Device
	d2h  device.Stream
	h2d  device.Stream
	disk *workq.Queue

	records   map[any]*record // by storage, for deduplication
	order     []*record       // this step's records in the order they were saved
	live      int             // records not yet dropped
	queue     []*record       // saved, not yet moved (KeepLast)
	inFlight  []*record       // copies off the device not yet known to be finished
	hostBytes int64
	diskBytes int64
	stats     Stats
	hooks     *ferry.SavedTensorHooks

	// earlyFree releases the device tensor as soon as its copy is enqueued
	// rather than when the copy has finished: the torchtune bug. Tests set
	// it to show that poisoned memory catches that mistake.
	earlyFree bool
}

// New makes an Offloader for tensors on dev.
func New(dev device.Device, cfg Config) (*Offloader, error) {
	if cfg.MaxInFlight < 1 || cfg.Lookahead < 1 || cfg.KeepLast < 0 || cfg.MinBytes < 0 {
		return nil, fmt.Errorf("offload: MaxInFlight and Lookahead must be at least 1, KeepLast and MinBytes at least 0 (got %+v)", cfg)
	}
	if cfg.HostLimit < 0 && cfg.DiskDir == "" {
		return nil, errors.New("offload: HostLimit < 0 sends everything to disk, but DiskDir is empty")
	}
	if cfg.DiskDir != "" {
		if st, err := os.Stat(cfg.DiskDir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("offload: disk tier directory %q is not usable: %v; create it or choose another with DiskDir", cfg.DiskDir, err)
		}
	}
	o := &Offloader{cfg: cfg, dev: dev, host: dev.Host(), records: map[any]*record{}}
	var err error
	if o.d2h, err = dev.NewStream("d2h"); err != nil {
		return nil, fmt.Errorf("offload: %w", err)
	}
	if o.h2d, err = dev.NewStream("h2d"); err != nil {
		return nil, fmt.Errorf("offload: %w", err)
	}
	if cfg.DiskDir != "" {
		o.disk = workq.New()
	}
	o.hooks = &ferry.SavedTensorHooks{Pack: o.pack, Unpack: o.unpack}
	return o, nil
}

// Hooks returns the hooks to push on a tape (the same value every call).
func (o *Offloader) Hooks() *ferry.SavedTensorHooks { return o.hooks }

// Stats returns the statistics so far.
func (o *Offloader) Stats() Stats { return o.stats }

// Close waits for transfers in flight, lets go of everything still held and
// stops the disk goroutine. Tensors still packed must not be unpacked
// afterwards (close the tape first).
func (o *Offloader) Close() error {
	var errs []error
	for _, r := range o.order {
		if r != nil {
			errs = append(errs, o.drop(r))
		}
	}
	if o.disk != nil {
		o.disk.Close()
	}
	return errors.Join(errs...)
}

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

// packed is what autograd keeps for one saved tensor.
type packed struct {
	o      *Offloader
	rec    *record
	keep   *ferry.Tensor // tensors left on the device are kept as themselves
	shape  []int
	stride []int
	offset int
	view   *ferry.Tensor // the tensor Unpack returned
	done   bool
}

func (p *packed) Release() {
	if p.done {
		return
	}
	p.done = true
	if p.keep != nil {
		p.keep.Release()
		return
	}
	p.view.Release()
	p.rec.refs--
	if p.rec.refs == 0 {
		if err := p.o.drop(p.rec); err != nil && p.rec.err == nil {
			p.rec.err = err
		}
	}
}

// pack is the Pack hook.
func (o *Offloader) pack(t *ferry.Tensor, info ferry.SaveInfo) any {
	o.stats.SavedTensors++
	o.reap()
	if info.Parameter || t.StorageBytes() == 0 {
		o.stats.Kept++
		return &packed{keep: t}
	}
	p := &packed{o: o, shape: t.Shape(), stride: t.Strides()}
	_, p.offset = t.Block()
	// A storage saved before is placed where its first save put it,
	// whatever the policy says of this save: views of one storage travel
	// (or stay) together.
	if r := o.records[t.Storage()]; r != nil && !r.dropped {
		o.stats.Deduplicated++
		r.refs++
		p.rec = r
		t.Release()
		return p
	}
	place := Auto
	if o.cfg.Policy != nil {
		place = o.cfg.Policy(info, t)
	}
	if place == Auto && t.StorageBytes() < o.cfg.MinBytes {
		place = Keep
	}
	if o.live == 0 {
		o.order = o.order[:0]
	}
	r := &record{key: t.Storage(), index: len(o.order), bytes: t.StorageBytes(), dtype: t.DType(), refs: 1, dev: t, weak: t.Weak(), tier: place}
	o.records[r.key] = r
	o.order = append(o.order, r)
	o.live++
	p.rec = r
	if place == Keep {
		o.stats.Kept++
		return p
	}
	if place != Auto { // a policy's explicit choice: move at once
		o.moveOut(r)
		return p
	}
	o.queue = append(o.queue, r)
	for len(o.queue) > o.cfg.KeepLast {
		due := o.queue[0]
		o.queue = o.queue[1:]
		if !due.dropped {
			o.moveOut(due)
		}
	}
	return p
}

// tierFor chooses where r goes.
func (o *Offloader) tierFor(r *record) Placement {
	switch r.tier {
	case Host, Disk:
		if r.tier == Disk && o.disk == nil {
			return Host
		}
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

// moveOut starts the copy of r off the device.
func (o *Offloader) moveOut(r *record) {
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

// unpack is the Unpack hook.
func (o *Offloader) unpack(v any) (*ferry.Tensor, error) {
	p := v.(*packed)
	if p.keep != nil {
		return p.keep, nil
	}
	if p.view != nil {
		return p.view, nil
	}
	r := p.rec
	o.reap()
	if r.err != nil {
		return nil, o.describe(r, r.err)
	}
	first := !r.needed
	r.needed = true
	waited, err := o.bringBack(r)
	if err != nil {
		return nil, o.describe(r, err)
	}
	if first && (r.tier == Host || r.tier == Disk) {
		if waited {
			o.stats.Waited++
		} else {
			o.stats.Ready++ // prefetched in time, or never had to leave
		}
	}
	o.prefetchBefore(r)
	if e := ferry.Catch(func() error { p.view = r.dev.AsStrided(p.shape, p.stride, p.offset); return nil }); e != nil {
		err = e
	}
	return p.view, err
}

func (o *Offloader) describe(r *record, err error) error {
	where := "host memory"
	if r.tier == Disk {
		where = "disk (" + o.cfg.DiskDir + ")"
	}
	return fmt.Errorf("offload: a %s tensor moved to %s could not be brought back: %w", device.FormatBytes(r.bytes), where, err)
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
		err = r.file.close()
		r.file = nil
		o.diskBytes -= r.bytes
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
