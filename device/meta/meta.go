// Package meta is ferry's shape-only device: tensors have shapes and no
// data, yet every op allocates, frees and saves exactly as on a real
// device, through the same caching allocator and statistics. A training
// step on it gives that step's exact memory timeline at any model size, in
// milliseconds. Importing the package registers the "meta" kind.
//
// With a Profile (FLOP rates, bandwidths), the device also keeps simulated
// clocks for its streams: kernels advance the compute stream, copies the
// side streams, events carry times, and waiting advances the waiter. The
// simulated compute clock at the end of a step predicts its time, and the
// waits compute had to make predict its stalls. Without a profile every
// cost is zero: copies complete the moment they are issued.
package meta

import (
	"fmt"
	"strings"
	"sync"

	"ferry/device"
)

func init() { device.Register("meta", driver{}) }

type driver struct{}

func (driver) Open(index int, opts device.Options) (device.Device, error) {
	if index != 0 {
		return nil, fmt.Errorf("meta:%d: there is one meta device, meta:0", index)
	}
	for k := range opts.Params {
		return nil, fmt.Errorf("meta: unknown parameter %q (the meta device takes none)", k)
	}
	return New(opts, nil), nil
}

// Profile describes hardware for the cost model. Rates are per second.
type Profile struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"` // where the figures come from
	// MatmulFLOPS is the fp32 matrix-product rate.
	MatmulFLOPS float64 `json:"matmul_flops"`
	// MatmulBF16FLOPS is the rate of matrix products with bfloat16
	// operands (float32 accumulation; a GPU's tensor cores); 0 means
	// MatmulFLOPS, right where no faster bfloat16 path is known (a CPU
	// without a measured figure).
	MatmulBF16FLOPS float64 `json:"matmul_bf16_flops,omitempty"`
	// ElementwiseBF16 says the device's elementwise kernels take bfloat16
	// views (device.ElementwiseBF16Kernels), as the CPU and CUDA devices'
	// do: the meta device then allocates as those devices do for bfloat16
	// ops (no float32 temporaries). Without a profile it does, and so do
	// the built-in GPU profiles.
	ElementwiseBF16 bool `json:"elementwise_bf16,omitempty"`
	// AttentionFLOPS is the rate the attention kernels reach on their
	// products (q·kᵀ and weights·v, and backward's); 0 means MatmulFLOPS,
	// which is right where attention runs on the matrix-product kernel
	// (the CPU device). On a GPU ferry's tiled attention kernels run on the
	// fp32 cores without a library's tuning: see docs/gpu-estimate.md.
	AttentionFLOPS float64 `json:"attention_flops,omitempty"`
	// AttentionCausalSkip says the attention kernels skip the key tiles
	// above the diagonal of a causal mask (ferry's CUDA kernels), so a
	// causal pass costs about half a full one; without it every score is
	// computed (the CPU device).
	AttentionCausalSkip bool `json:"attention_causal_skip,omitempty"`
	// MemoryBytesPerSec is the rate elementwise kernels move bytes at
	// (reads plus writes).
	MemoryBytesPerSec float64 `json:"memory_bytes_per_sec"`
	// KernelSeconds is a fixed cost per kernel (launch, dispatch).
	KernelSeconds float64 `json:"kernel_seconds"`
	// Host link, each way.
	H2DBytesPerSec float64 `json:"h2d_bytes_per_sec"`
	D2HBytesPerSec float64 `json:"d2h_bytes_per_sec"`
	// Disk, each way.
	DiskWriteBytesPerSec float64 `json:"disk_write_bytes_per_sec"`
	DiskReadBytesPerSec  float64 `json:"disk_read_bytes_per_sec"`
	// MemoryBytes is the device's memory, for planning (0: unknown).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// HostOptimizerBytesPerSec is the rate an optimizer stepping on the
	// host (optim.OnHost) moves bytes there, reads plus writes (AdamW: 28
	// bytes a parameter); 0 means MemoryBytesPerSec, right where the host
	// is the device (the CPU device).
	HostOptimizerBytesPerSec float64 `json:"host_optimizer_bytes_per_sec,omitempty"`
	// InterconnectBytesPerSec is the rate one rank's collectives move
	// bytes between ranks, each way: the bus bandwidth NCCL's tests
	// report (busbw), so that a ring all-reduce of n bytes over N ranks
	// takes 2(N−1)/N · n at this rate, a reduce-scatter or all-gather of
	// n bytes in all (N−1)/N · n. 0 means collectives are not modelled:
	// they take no time (SimulateCollective).
	InterconnectBytesPerSec float64 `json:"interconnect_bytes_per_sec,omitempty"`
	// InterconnectSeconds is a fixed cost per collective (its latency).
	InterconnectSeconds float64 `json:"interconnect_seconds,omitempty"`
	// CopyComputeShare is how many seconds compute loses per second of a
	// side-stream copy or disk transfer: 0 on a GPU, whose copy engines are
	// its own; more on a CPU, where copies run on the cores, caches and
	// memory bus compute uses (it can exceed 1: a copy also evicts what the
	// matrix kernels had in cache).
	CopyComputeShare float64 `json:"copy_compute_share,omitempty"`
	// HostSharesCompute says the host's cores are the device's (the CPU
	// device: host and device are one memory and the same cores), so
	// that host work beside the device (an optimizer's updates on the
	// host worker, BeginHostAt) takes compute's time as well instead of
	// running on cores of its own.
	HostSharesCompute bool `json:"host_shares_compute,omitempty"`
	// DiskSeconds is a fixed cost per disk transfer (the system calls
	// around the bytes and the hand-offs to the disk tier's goroutine),
	// beside the bytes at the disk rates.
	DiskSeconds float64 `json:"disk_seconds,omitempty"`
}

// Profile ranges: wide enough for any real machine, narrow enough that
// the cost model's sums and quotients stay finite (a rate of 1e-300 bytes
// per second makes a copy take infinite time, and the step NaN seconds).
const (
	minRate, maxRate   = 1e3, 1e16 // bytes per second: 1 KB/s to 10 PB/s
	minFLOPS, maxFLOPS = 1e6, 1e19
	maxKernelSeconds   = 1
	maxCopyShare       = 10
)

// Validate checks every field against its range (rates finite and within
// [1e3, 1e16] bytes/s, matmul_flops within [1e6, 1e19] and so
// matmul_bf16_flops and attention_flops where not 0, kernel_seconds and disk_seconds
// within [0, 1], copy_compute_share within [0, 10], memory_bytes within
// [0, device.MaxBytes]) and names every field out of range.
func (p *Profile) Validate() error {
	var bad []string
	check := func(name string, v, lo, hi float64, unit string) {
		if !(v >= lo && v <= hi) { // NaN fails too
			bad = append(bad, fmt.Sprintf("%s is %v, want %g to %g%s", name, v, lo, hi, unit))
		}
	}
	check("matmul_flops", p.MatmulFLOPS, minFLOPS, maxFLOPS, " (floating-point operations per second, e.g. 5e13)")
	for _, r := range []struct {
		name string
		v    float64
	}{{"memory_bytes_per_sec", p.MemoryBytesPerSec}, {"h2d_bytes_per_sec", p.H2DBytesPerSec},
		{"d2h_bytes_per_sec", p.D2HBytesPerSec}, {"disk_write_bytes_per_sec", p.DiskWriteBytesPerSec},
		{"disk_read_bytes_per_sec", p.DiskReadBytesPerSec}} {
		check(r.name, r.v, minRate, maxRate, " (bytes per second, e.g. 2.5e10)")
	}
	if p.MatmulBF16FLOPS != 0 {
		check("matmul_bf16_flops", p.MatmulBF16FLOPS, minFLOPS, maxFLOPS, " (floating-point operations per second; 0 or absent: matmul_flops)")
	}
	if p.AttentionFLOPS != 0 {
		check("attention_flops", p.AttentionFLOPS, minFLOPS, maxFLOPS, " (floating-point operations per second; 0 or absent: matmul_flops)")
	}
	if p.HostOptimizerBytesPerSec != 0 {
		check("host_optimizer_bytes_per_sec", p.HostOptimizerBytesPerSec, minRate, maxRate, " (bytes per second; 0 or absent: memory_bytes_per_sec)")
	}
	if p.InterconnectBytesPerSec != 0 {
		check("interconnect_bytes_per_sec", p.InterconnectBytesPerSec, minRate, maxRate, " (bytes per second between ranks; 0 or absent: collectives not modelled)")
	}
	check("interconnect_seconds", p.InterconnectSeconds, 0, maxKernelSeconds, " (seconds per collective, e.g. 2e-5)")
	check("kernel_seconds", p.KernelSeconds, 0, maxKernelSeconds, " (seconds per kernel launch, e.g. 5e-6)")
	check("copy_compute_share", p.CopyComputeShare, 0, maxCopyShare, "")
	check("disk_seconds", p.DiskSeconds, 0, maxKernelSeconds, " (seconds per disk transfer, e.g. 5e-5)")
	if p.MemoryBytes < 0 || p.MemoryBytes > device.MaxBytes {
		bad = append(bad, fmt.Sprintf("memory_bytes is %d, want 0 (unknown) to %d", p.MemoryBytes, int64(device.MaxBytes)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("profile %q: %s", p.Name, strings.Join(bad, "; "))
	}
	return nil
}

// Device is the meta device.
type Device struct {
	name  string
	alloc *device.Allocator
	host  *Device
	sim   *sim
	comp  *stream
	kern  kernels

	mu      sync.Mutex
	streams []*stream
}

// sim is the simulated time shared by a device and its host.
type sim struct {
	profile *Profile
	disk    float64 // the disk's clock
	// link is when the host link is next free each way (0: to the
	// device, 1: to the host): copies on any streams share it, as they
	// share a GPU's copy engines.
	link [2]float64
	// hostClock is when the host's cores are next free for work that runs
	// beside the device (BeginHostAt); hostAsync is set while such work
	// is being accounted, and hostEnd is where it ended.
	hostClock          float64
	hostAsync          bool
	hostStart, hostEnd float64
	// interconnect is when the link between ranks is next free
	// (SimulateCollective): one collective at a time, as NCCL runs a
	// communicator's on one stream.
	interconnect float64
	// busy sums the seconds of work issued to each resource: compute
	// kernels, copies to the device, copies to the host, host work.
	busy  Busy
	stall float64 // total time compute waited for events
}

// New opens a meta device; profile nil means every cost is zero.
func New(opts device.Options, profile *Profile) *Device {
	s := &sim{profile: profile}
	d := newDevice("meta", opts, s)
	d.host = newDevice("meta host", device.Options{}, s)
	d.host.host = d.host
	d.host.comp = d.comp // one simulated clock for device and host
	return d
}

func newDevice(name string, opts device.Options, s *sim) *Device {
	d := &Device{name: name, sim: s}
	d.alloc = device.NewAllocator(&memory{host: name != "meta"}, device.AllocatorConfig{Name: name, Capacity: opts.Capacity})
	d.comp = &stream{name: "compute", dev: d, compute: true}
	d.kern = kernels{d: d}
	return d
}

// DataLess marks the device as holding no values (see device.HasData).
func (d *Device) DataLess() {}

func (d *Device) Name() string { return d.name }

// ReleaseSites says that a released tensor of this device does not
// record where it was released (ferry.Tensor.Release's call stack): the
// planner replays meta steps by the thousand, and runtime.Callers took a
// quarter of their time. A use after release still panics, naming the
// tensor.
func (d *Device) ReleaseSites() bool           { return false }
func (d *Device) Allocator() *device.Allocator { return d.alloc }
func (d *Device) Compute() device.Stream       { return d.comp }
func (d *Device) Host() device.Device          { return d.host }
func (d *Device) Kernels() device.Kernels      { return d.kern }

// Profile is the cost model in use, or nil.
func (d *Device) Profile() *Profile { return d.sim.profile }

// Now is the simulated time of the compute stream, in seconds.
func (d *Device) Now() float64 { return d.comp.clock }

// StallSeconds is the simulated time compute has waited for other streams.
func (d *Device) StallSeconds() float64 { return d.sim.stall }

func (d *Device) NewStream(name string) (device.Stream, error) {
	if d.alloc.Closed() {
		return nil, fmt.Errorf("%s: NewStream: %w", d.name, device.ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &stream{name: name, dev: d}
	d.streams = append(d.streams, s)
	return s, nil
}

// Copy accounts a copy of len(src) bytes on s, at the link's rate.
func (d *Device) Copy(s device.Stream, dst, src device.Span) error {
	if d.alloc.Closed() {
		return fmt.Errorf("%s: copy: %w", d.name, device.ErrClosed)
	}
	if dst.Len != src.Len {
		return fmt.Errorf("meta: copy of %d bytes into a span of %d", src.Len, dst.Len)
	}
	st, ok := s.(*stream)
	if !ok {
		return fmt.Errorf("meta: Copy on a stream of another device (%T)", s)
	}
	dh, sh := isHost(dst.Block), isHost(src.Block)
	d.account(st, src.Len, sh && !dh, dh && !sh)
	return nil
}

// SimulateLink accounts n bytes over the link on s (toDevice: from the
// host to the device, else back), as Copy accounts a copy between a host
// and a device block, for a transfer whose memory the caller keeps
// elsewhere (ZeRO-3's shards in host memory, package dist). Its end is
// s's next Record.
func (d *Device) SimulateLink(s device.Stream, n int64, toDevice bool) error {
	if d.alloc.Closed() {
		return fmt.Errorf("%s: link: %w", d.name, device.ErrClosed)
	}
	st, ok := s.(*stream)
	if !ok {
		return fmt.Errorf("meta: SimulateLink on a stream of another device (%T)", s)
	}
	d.account(st, n, toDevice, !toDevice)
	return nil
}

// account charges a transfer of n bytes on st: over the link to the
// device (up) or to the host (down), else within one memory.
func (d *Device) account(st *stream, n int64, up, down bool) {
	var cost float64
	link := -1
	if p := d.sim.profile; p != nil {
		switch {
		case up:
			cost, link = float64(n)/p.H2DBytesPerSec, 0
		case down:
			cost, link = float64(n)/p.D2HBytesPerSec, 1
		default:
			cost = 2 * float64(n) / p.MemoryBytesPerSec
		}
	}
	switch link {
	case 0:
		d.sim.busy.ToDevice += cost
	case 1:
		d.sim.busy.ToHost += cost
	}
	if link >= 0 && !st.compute {
		// One link each way: a copy waits for the copies before it on
		// every stream.
		st.clock = max(st.clock, d.sim.link[link])
		st.run(cost)
		d.sim.link[link] = st.clock
		return
	}
	st.run(cost)
}

func isHost(b *device.Block) bool { return b.Segment().(*segment).host }

// SimulateDisk accounts a disk transfer of n bytes that starts once after
// has completed (nil: now), and returns the event of its end. The offloader
// uses it for its disk tier on this device, which has no bytes to write.
func (d *Device) SimulateDisk(n int64, write bool, after device.Event) device.Event {
	s := d.sim
	start := max(s.disk, d.comp.clock)
	if e, ok := after.(*event); ok {
		start = max(start, e.t)
	}
	if p := s.profile; p != nil {
		cost := p.DiskSeconds + float64(n)/p.DiskReadBytesPerSec
		if write {
			cost = p.DiskSeconds + float64(n)/p.DiskWriteBytesPerSec
		}
		start += cost
		d.comp.clock += p.CopyComputeShare * cost
		s.busy.Compute += p.CopyComputeShare * cost // the cores compute would use
	}
	s.disk = start
	return &event{t: start, dev: d}
}

// SimulateHostWork accounts a round trip through the host that compute
// waits for: down bytes copied to the host, host bytes read and written
// there by host code, up bytes copied back, one after the other. An
// optimizer with its state on the host (optim.OnHost) steps that way, and
// charges its steps here on this device, which has no bytes to move.
func (d *Device) SimulateHostWork(down, host, up int64) {
	p := d.sim.profile
	if p == nil {
		return
	}
	rate := p.HostOptimizerBytesPerSec
	if rate == 0 {
		rate = p.MemoryBytesPerSec
	}
	cost := float64(down)/p.D2HBytesPerSec + float64(host)/rate + float64(up)/p.H2DBytesPerSec
	d.sim.busy.ToHost += float64(down) / p.D2HBytesPerSec
	d.sim.busy.ToDevice += float64(up) / p.H2DBytesPerSec
	d.sim.busy.Host += float64(host) / rate
	if s := d.sim; s.hostAsync {
		s.hostEnd += cost
		if p.HostSharesCompute {
			// The same cores: compute loses the host's work.
			d.comp.clock += float64(host) / rate
			s.busy.Compute += float64(host) / rate
		}
		return
	}
	d.comp.clock += cost // compute waits: its clock moves, its busy time does not
}

// SimulateCollective accounts a collective among ranks ranks on the
// interconnect and returns the event of its end: op is "all_reduce" (n
// the buffer's bytes), "reduce_scatter" or "all_gather" (n the bytes of
// the whole, every rank's share together) or "broadcast" (n the
// buffer's). It starts when issued (the compute clock) or when the
// interconnect is free, whichever is later, and takes the ring
// algorithm's time at the profile's InterconnectBytesPerSec; with no
// such rate, or one rank, it takes none.
func (d *Device) SimulateCollective(op string, n int64, ranks int) device.Event {
	s := d.sim
	p := s.profile
	if p == nil || p.InterconnectBytesPerSec == 0 || ranks < 2 {
		return &event{t: d.comp.clock, dev: d}
	}
	share := float64(ranks-1) / float64(ranks)
	moved := share * float64(n) // each rank sends (and receives) this much
	switch op {
	case "all_reduce":
		moved *= 2 // a reduce-scatter, then an all-gather
	case "broadcast":
		moved = float64(n) // pipelined through the ring: n once
	}
	cost := p.InterconnectSeconds + moved/p.InterconnectBytesPerSec
	start := max(s.interconnect, d.comp.clock)
	s.interconnect = start + cost
	s.busy.Interconnect += cost
	return &event{t: s.interconnect, dev: d}
}

// Busy is the time each resource of a simulated step spent working: the
// lower bound of a step that overlaps them perfectly is their maximum.
type Busy struct {
	Compute  float64 `json:"compute"`
	ToDevice float64 `json:"to_device"`
	ToHost   float64 `json:"to_host"`
	Host     float64 `json:"host"`
	// Interconnect is the collectives among ranks (SimulateCollective).
	Interconnect float64 `json:"interconnect,omitempty"`
}

// Max is the largest of the five.
func (b Busy) Max() float64 { return max(b.Compute, b.ToDevice, b.ToHost, b.Host, b.Interconnect) }

// Sub is b minus o, for the work of one step.
func (b Busy) Sub(o Busy) Busy {
	return Busy{b.Compute - o.Compute, b.ToDevice - o.ToDevice, b.ToHost - o.ToHost, b.Host - o.Host, b.Interconnect - o.Interconnect}
}

// Busy returns the work issued so far to each resource, in seconds.
func (d *Device) Busy() Busy { return d.sim.busy }

// HostFree is when the host's cores are next free for work beside the
// device.
func (d *Device) HostFree() float64 { return d.sim.hostClock }

// EventTime is e's simulated time, if e is the meta device's.
func (d *Device) EventTime(e device.Event) (float64, bool) {
	if ev, ok := e.(*event); ok {
		return ev.t, true
	}
	return 0, false
}

// BeginHostAt starts accounting host work that runs beside the device (a
// host optimizer's step on a worker, package offload) at simulated time
// t, no earlier than HostFree: SimulateHostWork until EndHostAsync
// charges the host's cores, one piece of work after another, not the
// compute stream.
func (d *Device) BeginHostAt(t float64) {
	s := d.sim
	s.hostAsync = true
	s.hostStart = max(s.hostClock, t)
	s.hostEnd = s.hostStart
}

// EndHostAsync ends what BeginHostAt began and returns the event of
// the work's end, which whatever needs its result waits for.
func (d *Device) EndHostAsync() device.Event {
	s := d.sim
	s.hostAsync = false
	s.hostClock = s.hostEnd
	return &event{t: s.hostEnd, dev: d}
}

// Close releases the device's memory and its host's; afterwards, as on
// every device, allocations, copies and new streams fail with
// device.ErrClosed.
func (d *Device) Close() error {
	if d.host != d {
		_ = d.host.alloc.Close() // the host's memory is only numbers: closing it cannot fail
	}
	return d.alloc.Close()
}

// stream is a simulated stream: its clock is when its last work ends.
type stream struct {
	name    string
	dev     *Device
	compute bool
	clock   float64
}

func (s *stream) Name() string { return s.name }

// run accounts cost seconds of work issued now.
func (s *stream) run(cost float64) {
	if s.compute {
		s.clock += cost
		s.dev.sim.busy.Compute += cost
		return
	}
	// Side work starts when issued (the compute clock) or when the stream
	// is free, whichever is later; on a CPU it also takes compute's time.
	s.clock = max(s.clock, s.dev.comp.clock) + cost
	if p := s.dev.sim.profile; p != nil {
		s.dev.comp.clock += p.CopyComputeShare * cost
		s.dev.sim.busy.Compute += p.CopyComputeShare * cost // the cores compute would use
	}
}

func (s *stream) Record() device.Event { return &event{t: s.clock, dev: s.dev} }

func (s *stream) Wait(e device.Event) {
	ev, ok := e.(*event)
	if !ok {
		_ = e.Synchronize()
		return
	}
	if s.compute && ev.t > s.clock {
		s.dev.sim.stall += ev.t - s.clock
	}
	s.clock = max(s.clock, ev.t)
}

func (s *stream) Synchronize() error {
	if !s.compute {
		s.dev.comp.Wait(s.Record())
	}
	return nil
}

// event is a point in simulated time. The host is taken to keep pace with
// the compute stream: an event is done once compute's clock has reached it,
// and waiting for it on the host moves compute's clock there.
type event struct {
	t   float64
	dev *Device
}

func (e *event) Done() bool { return e.t <= e.dev.comp.clock }

func (e *event) Synchronize() error {
	e.dev.comp.Wait(e)
	return nil
}

// memory hands out segments that are only numbers.
type memory struct {
	host bool
	next uint64
}

type segment struct {
	id   uint64
	size int64
	host bool
}

func (m *memory) Reserve(size int64) (device.Segment, error) {
	m.next++
	return &segment{id: m.next, size: size, host: m.host}, nil
}

func (m *memory) Release(device.Segment) error { return nil }
