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
// What stays on the device: parameters, tensors under MinBytes, the last
// KeepLast storages saved, and storages that a handle outside the tape
// holds when they are due to move, such as the step's input batch, which
// the caller keeps (tape.Input): copying those would free nothing, since
// their memory stays allocated until the caller lets go (see
// Stats.HeldOutside and ferry.Tensor.OutsideHandles). A tensor that the
// tape's own handle keeps until the step ends (a batch given to the tape
// with Adopt and never released) is still copied: when it is due to move,
// whether the step will release it before backward cannot be known.
//
// Two tiers take what leaves the device: host memory (a reusable pool,
// pinned on a GPU) and, beyond a host budget, files on disk. SaveOnHost is
// the simple synchronous alternative PyTorch offers, kept for comparison.
package offload

import (
	"errors"
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/internal/goid"
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
	// HeldOutside counts distinct storages left on the device because a
	// handle outside the tape held them when they were due to move (the
	// step's input batch, which the caller keeps): copying them would
	// free nothing (see ferry.Tensor.OutsideHandles).
	HeldOutside int `json:"held_outside"`

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
	d.HeldOutside -= earlier.HeldOutside
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
//
// The training goroutine is the one that packs the first tensor while the
// Offloader holds none: its hooks used from another goroutine while it
// holds tensors panic (Pack) or fail (Unpack) with a *ferry.Error, rather
// than corrupt its records, and so do hooks given a tensor of a device
// other than the Offloader's.
type Offloader struct {
	owner uintptr // goid.Current() of the training goroutine; see checkOwner
	cfg   Config
	dev   device.Device
	host  device.Device
	d2h   device.Stream
	h2d   device.Stream
	disk  *workq.Queue

	records   map[any]*record // by storage, for deduplication
	order     []*record       // this step's records in the order they were saved
	live      int             // records not yet dropped
	queue     []*record       // saved, not yet moved (KeepLast)
	inFlight  []*record       // copies off the device not yet known to be finished
	hostBytes int64
	diskBytes int64 // bytes in the disk tier's files of live records
	// spare holds the disk tier's files of dropped records, open and
	// unlinked, by size, for later writes of that size (disk.go);
	// spareBytes is their sum. Training goroutine only.
	spare      map[int64][]*diskFile
	spareBytes int64
	filesMade  int // files the disk tier was asked to create (tests)
	stats      Stats
	hooks      *ferry.SavedTensorHooks

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
		if err := probeDir(cfg.DiskDir); err != nil {
			return nil, err
		}
		sweepStale(cfg.DiskDir)
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

// Streams are the side streams the offloader's copies run on, to and from
// the host: offload.Memory's Streamer shares them, and so must a replay
// of its step (package plan), where a block freed after a copy is reused
// once that stream has passed it.
func (o *Offloader) Streams() (d2h, h2d device.Stream) { return o.d2h, o.h2d }

// Close waits for transfers in flight, lets go of everything still held and
// stops the disk goroutine. Tensors still packed must not be unpacked
// afterwards (close the tape first). While it holds tensors, closing from a
// goroutine other than the training goroutine returns an error and closes
// nothing.
func (o *Offloader) Close() error {
	if err := o.checkOwner("close"); err != nil {
		return err
	}
	var errs []error
	for _, r := range o.order {
		if r != nil {
			errs = append(errs, o.drop(r))
		}
	}
	if o.disk != nil {
		o.disk.Close()
		errs = append(errs, o.closeSpares())
	}
	return errors.Join(errs...)
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
	if p.o != nil {
		if err := p.o.checkOwner("release"); err != nil {
			panic(err) // autograd, the caller, turns it into an error
		}
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

// checkOwner returns an *ferry.Error unless the calling goroutine may use
// the Offloader: the one that last started packing with nothing held.
func (o *Offloader) checkOwner(op string) error {
	g := goid.Current()
	if g == o.owner || o.live == 0 && len(o.inFlight) == 0 {
		return nil
	}
	return &ferry.Error{Op: "offload " + op, Msg: "the offloader is used from a goroutine other than the one training with it; " +
		"an Offloader serves one training goroutine at a time: give each goroutine its own"}
}

// pack is the Pack hook.
func (o *Offloader) pack(t *ferry.Tensor, info ferry.SaveInfo) any {
	if err := o.checkOwner("pack"); err != nil {
		t.Release()
		panic(err)
	}
	if o.live == 0 && len(o.inFlight) == 0 {
		o.owner = goid.Current() // nothing held: whoever packs now trains
	}
	if t.Device() != o.dev {
		t.Release()
		panic(otherDevice("offload", info, t, o.dev))
	}
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
		if place == Disk && o.disk == nil {
			// Honoured or refused, never quietly turned into a host placement.
			t.Release()
			panic(&ferry.Error{Op: "offload", Msg: fmt.Sprintf("the policy places a tensor saved by %s in %q on disk, "+
				"but this offloader has no disk tier; set Config.DiskDir (ferry demo --disk-dir)", info.Op, info.Module)})
		}
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

// otherDevice is the error of hooks made for dev given t, of another.
func otherDevice(hooks string, info ferry.SaveInfo, t *ferry.Tensor, dev device.Device) *ferry.Error {
	return &ferry.Error{Op: hooks + " pack", Msg: fmt.Sprintf("a tensor saved by %s is on %s, but the hooks were made for %s; "+
		"make one offloader per device, and push its hooks only around ops on that device",
		info.Op, device.Identify(t.Device()), device.Identify(dev))}
}

// unpack is the Unpack hook.
func (o *Offloader) unpack(v any) (*ferry.Tensor, error) {
	if err := o.checkOwner("unpack"); err != nil {
		return nil, err
	}
	p, ok := v.(*packed)
	if !ok || p.o != nil && p.o != o {
		return nil, &ferry.Error{Op: "offload unpack", Msg: fmt.Sprintf("a value this offloader did not pack (%T)", v)}
	}
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
