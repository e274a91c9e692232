package dist

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"ferry"
	"ferry/device"
)

// ShardGrain is the granule of a ZeRO-3 shard, in elements: every rank's
// share of a parameter is a multiple of it (the last rank's may be
// shorter, or empty). It is a multiple of every block-wise optimizer's
// block in package optim (AdamW8bit quantises 256 elements at a time),
// so that a shard's optimizer state is exactly its part of the whole
// parameter's: blocks never straddle two ranks.
const ShardGrain = 256

// FullShardOptions configure a FullShard. The zero value asks for the
// defaults.
type FullShardOptions struct {
	// Prefetch is how many parameter uses ahead of the current one a
	// gather starts, following the previous step's order of uses (the
	// first step gathers each parameter when it is used). 0 means 2;
	// negative means none.
	Prefetch int
	// Device, if set, is a communicator of the same ranks on the
	// parameters' device (NCCL: ferry/dist/nccl.OnDevice): the gathers,
	// reduce-scatters, the broadcast and the norm's gathers then run on
	// device memory, on a side stream, never through host memory
	// (zero3dev.go). The Comm still carries the rest (the step's failure
	// flag, checkpoints' gathers, the layout check).
	Device DeviceComm
	// ParamType is the element type the matrix products of a tape under
	// bfloat16 autocast read the parameters in (PyTorch FSDP's
	// MixedPrecisionPolicy param_dtype): Float32 (the zero value), the float32
	// parameters are gathered and the tape casts them; BFloat16, each
	// parameter has a paged bfloat16 copy, gathered from the ranks'
	// shards, each rounded on its rank (half the bytes of a float32
	// gather), which Attach hands the tape as the parameter's cast
	// (ferry.Tape.SetCastSource). Its bits are the tape's own cast's, so
	// nothing changes a bit; the tape no longer keeps a whole bfloat16
	// copy of every weight until backward, only those in use. The float32
	// parameter is then gathered only for what reads it in float32 (an
	// embedding, a norm, a bias).
	ParamType device.DType
	// ShardsOnHost keeps each shard's values in host memory (ZeRO-3
	// offload: DeepSpeed's offload_param, FSDP's CPUOffloadPolicy): the
	// shard tensors the optimizer steps are paged out for good, their
	// values a host master that a gather reads and the optimizer, whose
	// state must then be on the host (optim.OnHost), updates in place
	// (optim.HostCopier). A rank's device then holds none of its shards.
	// On the device path (Device) a gather first copies the shard up on
	// its side stream.
	ShardsOnHost bool
}

// FullShard is ZeRO stage 3 on a Comm (PyTorch's FSDP, DeepSpeed's
// ZeRO-3): every parameter is split evenly by elements across the ranks,
// each rank keeping one contiguous shard of it (Shards), and a
// parameter's whole values exist on a rank only around its uses.
//
// Parameters are paged (ferry.Pager): while sharded, a parameter's
// storage is paged out, and an op that uses it brings it back by an
// all-gather of the ranks' shards, started ahead of use where the last
// step's order of uses says it comes next (Prefetch); the tape's record
// hook (Attach) frees it once the ops of forward that use it are
// recorded, and GradReady once its gradient is complete in backward. So a
// rank holds its shards, plus the few parameters in use or prefetched.
//
// In backward, a gradient leaves the device as soon as it is complete:
// it is reduce-scattered, each rank receiving the mean over ranks of its
// shard's part (GradReady starts the collectives in a fixed order, the
// parameters' in reverse, so that every rank issues them alike), and
// Wait writes each part into its shard's Grad. The optimizer steps only
// the shards (Optimizer): its state is this rank's part alone.
//
// Nothing changes a bit against unsharded data parallelism on two ranks
// or on NewGroup's (a reduce-scatter sums as an all-reduce does there):
// the gathered values are the shards' bits, an update is elementwise
// (every optimizer of package optim: shards are multiples of ShardGrain,
// so block-wise state splits at block boundaries), and the gradients'
// norm for clipping (ClipGradNorm) is computed on each whole gradient,
// gathered one at a time, as optim.GradNorm does.
//
// Every rank must run the same ops in the same order (the same model on
// batches of one shape), since every gather is a collective. With
// gradient accumulation, the gradients of the micro-batches before the
// last add up whole on each rank, as without sharding (PyTorch's
// no_sync), and are reduce-scattered once, at the last (SetReduce).
//
// Lifecycle: NewFullShard leaves the parameters whole. Broadcast (whole)
// puts one rank's values everywhere; Shard splits them and frees the
// whole values; Unshard (a collective) gathers every parameter back for
// good, for what reads whole parameters (an evaluation, a checkpoint, a
// sample); Shard again splits them anew from their values then. Per
// step, on every rank: BeginStep; forward with Attach(tape); SetReduce,
// backward with GradReady; Wait; the optimizer (Optimizer) steps; EndStep.
//
// A FullShard is used from the goroutine that trains.
type FullShard struct {
	c        Comm
	prefetch int
	params   []*fsParam // deduplicated, in order
	byTensor map[*ferry.Tensor]*fsParam
	byStore  map[any]*fsCopy // the parameters' storages and their bfloat16 copies'
	sharded  bool
	closed   bool
	lowCopy  bool // FullShardOptions.ParamType is BFloat16
	onHost   bool // FullShardOptions.ShardsOnHost
	// masters are the parameters by their shard's storage, with the
	// shards in host memory.
	masters map[any]*fsParam
	// On a device that simulates time, the link's time of what crosses
	// it between host memory and the device on a device communicator's
	// path (NCCL's), which the host path's bytes do not show: each
	// shard in host memory up before its gather (up), each gradient's
	// share landing in host memory down after its reduce-scatter (down).
	link     linkSim
	up, down device.Stream

	// The order of uses: the previous step's (order) and this step's so
	// far (uses); pos is where in order the last use was found.
	order, uses []*fsCopy
	pos         int
	stepping    bool

	// Reduce-scatters: reduce says whether this backward makes them;
	// rsNext counts the parameters, in reverse order, whose reduce-scatter
	// has started; stepErr is the first error of the step, for Wait.
	reduce  bool
	rsNext  int
	stepErr error
	// beside: the shards' steps beside the device (SetStepBeside), or nil.
	beside *besideState

	// dc and side: the collectives on the device (FullShardOptions.Device)
	// and their stream; nil for the host path.
	dc   DeviceComm
	side device.Stream
	dev  device.Device

	shared bool // parameters on a device without values: one host buffer for all (one)
	one    []float32
	pool   [][]float32 // free host buffers
	stats  FullShardStats
}

// fsParam is one parameter storage and this rank's shard of it.
type fsParam struct {
	i      int
	p      *ferry.Tensor
	n, per int // elements; elements per rank (per × ranks ≥ n)
	lo, hi int // this rank's elements, [lo, hi)
	shard  *ferry.Tensor
	// master holds the shard's values in host memory
	// (FullShardOptions.ShardsOnHost), the shard being paged out but when
	// something brings it to the device (masterVersion: its version
	// then); nil otherwise.
	master        *ferry.Tensor
	masterVersion uint32
	// whole is p itself, gathered in float32; low its bfloat16 copy for
	// products (FullShardOptions.ParamType), or nil.
	whole fsCopy
	low   *fsCopy
	// dgrad is the whole gradient awaiting its reduce-scatter on the
	// device path.
	dgrad *ferry.Tensor
	// host is the whole values in host memory, between GatherHost and
	// DropHost on the root (HostData).
	host *ferry.Tensor
	// This backward: the gradient is complete (ready), its
	// reduce-scatter's event and buffers, and its part written into the
	// shard's gradient (finished).
	ready, finished bool
	rs              device.Event
	rsSend, rsRecv  []float32
}

// land marks fp's share of the step's reduced gradient finished, once per
// step, after waiting for its reduce-scatter (on the device path, for its
// copy down to host memory), and reports whether this rank has a shard
// whose gradient is to be written.
func (fp *fsParam) land() (write bool, err error) {
	if fp.finished {
		return false, nil
	}
	fp.finished = true
	if fp.rs != nil {
		if err := fp.rs.Synchronize(); err != nil {
			return false, err
		}
	}
	return fp.shard != nil, nil
}

// linkSim is implemented by devices that simulate time (the meta
// device): it accounts a transfer over the link.
type linkSim interface {
	SimulateLink(s device.Stream, n int64, toDevice bool) error
}

// simulateLink charges n bytes over the link (toDevice, or back) on a
// device that simulates time, on a stream of the FullShard's for each
// way; nothing elsewhere.
func (f *FullShard) simulateLink(n int64, toDevice bool) error {
	if !f.shared || n == 0 {
		return nil
	}
	if f.link == nil {
		l, ok := f.dev.(linkSim)
		if !ok {
			return nil
		}
		up, err := f.dev.NewStream("shards-up")
		if err != nil {
			return err
		}
		down, err := f.dev.NewStream("grads-down")
		if err != nil {
			return err
		}
		f.link, f.up, f.down = l, up, down
	}
	s := f.down
	if toDevice {
		s = f.up
	}
	return f.link.SimulateLink(s, n, toDevice)
}

// fsCopy is a paged copy of one parameter's whole values that a rank
// gathers from the shards around its uses: the parameter itself (float32)
// or its bfloat16 copy (each rank rounds its shard before the gather).
type fsCopy struct {
	fp *fsParam
	t  *ferry.Tensor // the paged tensor: fp.p, or the bfloat16 copy
	// resident: t's storage holds a device block (gathered or whole);
	// used: an op has used it since; version: t's version then.
	resident, used bool
	version        uint32
	// A gather in flight: its event and buffers (on the device path, the
	// whole block it fills, on the side stream).
	gather     device.Event
	send, recv []float32
	block      *device.Block
}

// bf16 reports whether c is a bfloat16 copy.
func (c *fsCopy) bf16() bool { return c.t.DType() == device.BFloat16 }

// words is a rank's share of c in a gather, in float32 words: bfloat16
// elements travel two to a word (per is a multiple of ShardGrain, even).
func (c *fsCopy) words() int {
	if c.bf16() {
		return c.fp.per / 2
	}
	return c.fp.per
}

// copies are fp's paged copies: the parameter, and its bfloat16 copy if
// it has one.
func (fp *fsParam) copies() []*fsCopy {
	if fp.low != nil {
		return []*fsCopy{&fp.whole, fp.low}
	}
	return []*fsCopy{&fp.whole}
}

// FullShardStats count a FullShard's communication.
type FullShardStats struct {
	Gathers        int           // all-gathers of parameters, all steps
	Prefetched     int           // of which started ahead of use
	BytesGathered  int64         // received, all steps
	ReduceScatters int           // of gradients, all steps
	BytesScattered int64         // sent, all steps
	StallTime      time.Duration // waiting for gathers at use
	WaitTime       time.Duration // waiting for reduce-scatters in Wait
}

// NewFullShard prepares ZeRO-3 for params (float32 parameters on one
// device that require grad, in the same order on every rank; repeats are
// dropped): each gets a shard tensor of its share on this rank. The
// parameters stay whole until Shard.
func NewFullShard(c Comm, params []*ferry.Tensor, opts FullShardOptions) (*FullShard, error) {
	f := &FullShard{c: c, prefetch: opts.Prefetch, byTensor: map[*ferry.Tensor]*fsParam{}, byStore: map[any]*fsCopy{},
		onHost: opts.ShardsOnHost, masters: map[any]*fsParam{}}
	switch opts.ParamType {
	case device.Float32:
	case device.BFloat16:
		f.lowCopy = true
	default:
		return nil, fmt.Errorf("dist: NewFullShard: parameter type %s: want float32 or bfloat16", opts.ParamType)
	}
	if f.prefetch == 0 {
		f.prefetch = 2
	}
	f.prefetch = max(f.prefetch, 0)
	size, rank := c.Size(), c.Rank()
	var dev device.Device
	for _, p := range params {
		if _, dup := f.byTensor[p]; dup {
			continue
		}
		i := len(f.params)
		switch {
		case p.DType() != device.Float32:
			return nil, fmt.Errorf("dist: NewFullShard: parameter %d (%q) is %s; parameters are sharded as float32", i, p.Name(), p.DType())
		case !p.RequiresGrad():
			return nil, fmt.Errorf("dist: NewFullShard: parameter %d (%q) does not require grad", i, p.Name())
		case dev != nil && p.Device() != dev:
			return nil, fmt.Errorf("dist: NewFullShard: parameter %d (%q) is on %s, the others on %s", i, p.Name(), p.Device().Name(), dev.Name())
		case p.Pager() != nil:
			return nil, fmt.Errorf("dist: NewFullShard: parameter %d (%q) already has a pager (host memory?): ZeRO-3 shards parameters that live on the device", i, p.Name())
		case !p.IsContiguous() || p.StorageBytes() != p.Bytes():
			return nil, fmt.Errorf("dist: NewFullShard: parameter %d (%q) is a view of a larger storage; shard whole parameters", i, p.Name())
		case f.byStore[p.Storage()] != nil:
			return nil, fmt.Errorf("dist: NewFullShard: parameters %d and %d (%q) share a storage under two handles; list a tied weight by one handle", f.byStore[p.Storage()].fp.i, i, p.Name())
		}
		dev = p.Device()
		n := p.Numel()
		per := (n + size - 1) / size
		per = (per + ShardGrain - 1) / ShardGrain * ShardGrain
		lo, hi := min(rank*per, n), min((rank+1)*per, n)
		fp := &fsParam{i: i, p: p, n: n, per: per, lo: lo, hi: hi}
		fp.whole = fsCopy{fp: fp, t: p, resident: true}
		f.params = append(f.params, fp)
		f.byTensor[p] = fp
		f.byStore[p.Storage()] = &fp.whole
	}
	f.shared = dev != nil && !device.HasData(dev)
	f.dev = dev
	if f.lowCopy && dev != nil {
		if _, ok := dev.Kernels().(device.ConvertKernels); !ok {
			return nil, fmt.Errorf("dist: NewFullShard: bfloat16 parameter copies: %s has no bfloat16 tensors", dev.Name())
		}
	}
	if opts.Device != nil {
		switch {
		case opts.Device.Size() != size || opts.Device.Rank() != rank:
			return nil, fmt.Errorf("dist: NewFullShard: the device communicator is rank %d of %d, the Comm rank %d of %d", opts.Device.Rank(), opts.Device.Size(), rank, size)
		case dev == nil:
			return nil, errors.New("dist: NewFullShard: no parameters to shard on the device communicator")
		}
		side, err := dev.NewStream("collectives")
		if err != nil {
			return nil, fmt.Errorf("dist: NewFullShard: %w", err)
		}
		f.dc, f.side = opts.Device, side
	}
	err := ferry.Catch(func() error {
		for _, fp := range f.params {
			switch k := fp.hi - fp.lo; {
			case k == 0:
			case f.onHost:
				fp.master = ferry.ZerosAs(dev.Host(), device.Parameter, k).SetName(fp.p.Name())
				fp.shard = ferry.NewPagedOut(dev, device.Float32, []int{k}, f).SetName(fp.p.Name()).RequireGrad()
				f.masters[fp.shard.Storage()] = fp
			default:
				fp.shard = ferry.ZerosAs(dev, device.Parameter, k).SetName(fp.p.Name()).RequireGrad()
			}
			if f.lowCopy && fp.n > 0 {
				fp.low = &fsCopy{fp: fp, t: ferry.NewPagedOut(dev, device.BFloat16, fp.p.Shape(), f).SetName(fp.p.Name() + " (bfloat16)")}
				f.byStore[fp.low.t.Storage()] = fp.low
			}
		}
		return nil
	})
	if err != nil {
		f.releaseShards()
		return nil, err
	}
	return f, nil
}

// Comm is the communicator the parameters are sharded over.
func (f *FullShard) Comm() Comm { return f.c }

// Params are the parameters, deduplicated, in order.
func (f *FullShard) Params() []*ferry.Tensor {
	out := make([]*ferry.Tensor, len(f.params))
	for i, fp := range f.params {
		out[i] = fp.p
	}
	return out
}

// Shards are this rank's shard tensors, in the parameters' order, named
// as their parameters (a parameter whose share on this rank is empty has
// none): what the optimizer updates (Optimizer).
func (f *FullShard) Shards() []*ferry.Tensor {
	var out []*ferry.Tensor
	for _, fp := range f.params {
		if fp.shard != nil {
			out = append(out, fp.shard)
		}
	}
	return out
}

// ShardOf is p's shard on this rank and its elements' range in p, or nil
// (p is not sharded here, or this rank's share of it is empty).
func (f *FullShard) ShardOf(p *ferry.Tensor) (shard *ferry.Tensor, lo, hi int) {
	fp := f.byTensor[p]
	if fp == nil {
		return nil, 0, 0
	}
	return fp.shard, fp.lo, fp.hi
}

// Sharded reports whether the parameters are sharded (between Shard and
// Unshard).
func (f *FullShard) Sharded() bool { return f.sharded }

// Stats returns the communication counters.
func (f *FullShard) Stats() FullShardStats { return f.stats }

// ShardBytes is the bytes of parameters this rank keeps while sharded.
func (f *FullShard) ShardBytes() int64 {
	var b int64
	for _, fp := range f.params {
		b += 4 * int64(fp.hi-fp.lo)
	}
	return b
}

// buffer is a host buffer of n float32s from the pool (its contents are
// stale); put gives one back. On a device without values every buffer
// is one shared buffer (nobody reads what collectives leave there), so
// that a plan of a large model does not fault in gigabytes of host
// memory.
func (f *FullShard) buffer(n int) []float32 {
	if f.shared {
		if n > len(f.one) {
			f.one = make([]float32, n)
		}
		return f.one[:n]
	}
	for i, b := range f.pool {
		if cap(b) >= n {
			f.pool = slices.Delete(f.pool, i, i+1)
			return b[:n]
		}
	}
	return make([]float32, n)
}

func (f *FullShard) put(b []float32) {
	if b != nil && !f.shared {
		f.pool = append(f.pool, b[:0])
	}
}

// Broadcast copies root's parameter values to every rank. The parameters
// must be whole (before Shard, or after Unshard). A collective.
func (f *FullShard) Broadcast(root int) error {
	if f.sharded {
		return errors.New("dist: FullShard.Broadcast: the parameters are sharded; broadcast before Shard")
	}
	if f.dc != nil {
		return f.broadcastDevice(root)
	}
	return ferry.Catch(func() error {
		for _, fp := range f.params {
			if fp.n == 0 {
				continue
			}
			buf := f.buffer(fp.n)
			if err := fp.p.Device().Kernels().Download(f32bytes(buf), fp.p.View()); err != nil {
				return err
			}
			if err := f.c.Broadcast(buf, root).Synchronize(); err != nil {
				return err
			}
			err := upload(fp.p, buf, "dist.broadcast_parameters")
			f.put(buf)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Shard splits the whole parameters: each rank copies its share of each
// into its shard, and the parameters' device memory is freed. No
// communication: every rank must hold the same values (Broadcast).
func (f *FullShard) Shard() error {
	if f.closed {
		return errors.New("dist: FullShard.Shard: closed")
	}
	if f.sharded {
		return nil
	}
	err := ferry.Catch(func() error {
		for _, fp := range f.params {
			if err := f.toShard(fp); err != nil {
				return err
			}
			if fp.p.Pager() == nil {
				fp.p.SetPager(f)
			}
			f.release(&fp.whole)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.sharded = true
	return nil
}

// toShard copies this rank's share of fp's whole values into its shard.
func (f *FullShard) toShard(fp *fsParam) error {
	if fp.shard == nil {
		return nil
	}
	buf := f.buffer(fp.n)
	defer f.put(buf)
	if err := fp.p.Device().Kernels().Download(f32bytes(buf), fp.p.View()); err != nil {
		return err
	}
	if fp.master != nil {
		f.dropShardCopy(fp)
	}
	return upload(fp.values(), buf[fp.lo:fp.hi], "dist.shard_parameters")
}

// release frees c's device block; a parameter changed in place since it
// came (an op outside training wrote it) is copied back into the shard
// first. (Nothing writes a bfloat16 copy: it is made anew at each
// gather.)
func (f *FullShard) release(c *fsCopy) {
	if !c.resident {
		return
	}
	if c == &c.fp.whole && c.t.Version() != c.version {
		if err := f.toShard(c.fp); err != nil {
			panic(err)
		}
	}
	if c.fp.n > 0 {
		c.t.PageOut()
	}
	c.resident, c.used = false, false
}

// releaseParam frees both of fp's copies.
func (f *FullShard) releaseParam(fp *fsParam) {
	for _, c := range fp.copies() {
		f.release(c)
	}
}

// Unshard gathers every parameter back to stay whole, until the next
// Shard. A collective.
func (f *FullShard) Unshard() error {
	if !f.sharded {
		return nil
	}
	err := ferry.Catch(func() error {
		stepping := f.stepping
		f.stepping = false // no prefetch, no order
		defer func() { f.stepping = stepping }()
		for _, fp := range f.params {
			if low := fp.low; low != nil { // whole again: the tape casts it
				if low.gather != nil {
					_ = low.gather.Synchronize()
					f.dropGather(low)
				}
				f.release(low)
			}
			if !fp.whole.resident {
				if err := f.PageIn(fp.p); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.sharded = false
	return nil
}

// startGather starts the all-gather of c's shards (a bfloat16 copy's
// rounded on each rank first); prefetched says it is ahead of use.
func (f *FullShard) startGather(c *fsCopy, prefetched bool) error {
	if err := f.waitStep(c.fp); err != nil { // the shard's update, beside
		return err
	}
	if f.dc != nil {
		return f.startGatherDevice(c, prefetched)
	}
	fp := c.fp
	size, w := f.c.Size(), c.words()
	c.send, c.recv = f.buffer(w), f.buffer(size*w)
	k := fp.hi - fp.lo
	if fp.master != nil {
		// On the device path the shard goes up before the gather: its
		// time, on a device that simulates it (not its order: the gather
		// is not made to wait for it there).
		if err := f.simulateLink(4*int64(w), true); err != nil {
			return err
		}
	}
	switch {
	case f.shared:
	case !c.bf16():
		if fp.shard != nil {
			if err := f.readShard(fp, c.send[:k]); err != nil {
				panic(err)
			}
		}
		clear(c.send[k:])
	default:
		half := u16s(c.send)
		if fp.shard != nil {
			vals := f.buffer(k)
			err := f.readShard(fp, vals)
			if err == nil {
				device.ToBFloat16s(half[:k], vals)
			}
			f.put(vals)
			if err != nil {
				panic(err)
			}
		}
		clear(half[k:])
	}
	c.gather = f.c.AllGather(c.send, c.recv)
	f.stats.Gathers++
	f.stats.BytesGathered += 4 * int64(len(c.recv))
	if prefetched {
		f.stats.Prefetched++
	}
	return nil
}

// PageIn brings t's storage back, gathered from the ranks' shards: the
// gather a prefetch started, or one started now. (ferry.Pager.)
func (f *FullShard) PageIn(t *ferry.Tensor) error {
	c := f.byStore[t.Storage()]
	if c == nil {
		if fp := f.masters[t.Storage()]; fp != nil {
			return f.pageInShard(fp)
		}
		return errors.New("dist: FullShard: a storage it does not hold")
	}
	if c.resident {
		return nil
	}
	if c.gather == nil {
		if err := f.startGather(c, false); err != nil {
			return err
		}
	}
	if f.dc != nil {
		return f.installDevice(c)
	}
	if !c.gather.Done() {
		start := time.Now()
		err := c.gather.Synchronize()
		f.stats.StallTime += time.Since(start)
		if err != nil {
			f.dropGather(c)
			return err
		}
	} else if err := c.gather.Synchronize(); err != nil {
		f.dropGather(c)
		return err
	}
	dev := c.t.Device()
	bytes := c.t.PagedBytes()
	b, err := dev.Allocator().Alloc(bytes, device.Parameter)
	if err != nil {
		f.dropGather(c)
		return err
	}
	c.t.InstallBlock(b)
	err = ferry.Catch(func() error {
		if f.shared {
			return nil
		}
		return dev.Kernels().Upload(c.t.View(), f32bytes(c.recv)[:bytes])
	})
	f.dropGather(c)
	if err != nil {
		c.t.PageOut()
		return err
	}
	c.resident, c.used = true, false
	c.version = c.t.Version()
	return f.noteUse(c)
}

func (f *FullShard) dropGather(c *fsCopy) {
	f.put(c.send)
	f.put(c.recv)
	if c.block != nil { // gathered on the device, never installed
		f.dev.Compute().Wait(c.gather)
		f.dev.Allocator().Free(c.block)
		c.block = nil
	}
	c.send, c.recv, c.gather = nil, nil, nil
}

// noteUse records a use of fp in this step's order and starts the
// gathers of the next Prefetch uses the previous step made after it. The
// decision depends on the order of uses alone, the same on every rank,
// so every rank starts the same gathers at the same point.
func (f *FullShard) noteUse(c *fsCopy) error {
	if !f.stepping {
		return nil
	}
	if n := len(f.uses); n == 0 || f.uses[n-1] != c {
		f.uses = append(f.uses, c)
	}
	i := f.pos
	for i < len(f.order) && f.order[i] != c {
		i++
	}
	if i == len(f.order) {
		return nil // not where the previous step had it: no guess
	}
	f.pos = i + 1
	for j := f.pos; j < len(f.order) && j < f.pos+f.prefetch; j++ {
		if next := f.order[j]; !next.resident && next.gather == nil {
			// A prefetch that cannot start fails the step, rather than
			// leave this rank's collectives in another order than the
			// others'.
			if err := f.startGather(next, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// Attach sets tape's record hook, which frees a gathered parameter once
// the ops of forward that use it are recorded, and, with bfloat16 copies
// (FullShardOptions.ParamType), its cast source, which hands the tape
// each parameter's copy (ferry.Tape.SetCastSource).
func (f *FullShard) Attach(tape *ferry.Tape) {
	tape.SetRecordHook(f.recorded)
	if f.lowCopy {
		tape.SetCastSource(f.castSource)
	}
}

// castSource is p's bfloat16 copy while the parameters are sharded; nil
// (the tape casts p) otherwise.
func (f *FullShard) castSource(p *ferry.Tensor) *ferry.Tensor {
	c := f.byStore[p.Storage()]
	if !f.sharded || c == nil || c != &c.fp.whole || c.fp.low == nil {
		return nil
	}
	return c.fp.low.t
}

func (f *FullShard) recorded(op string, inputs []*ferry.Tensor) {
	if !f.sharded {
		return
	}
	for _, in := range inputs {
		if in == nil {
			continue
		}
		if c := f.byStore[in.Storage()]; c != nil && op != "input" {
			c.used = true
		}
	}
	for _, fp := range f.params {
		for _, c := range fp.copies() {
			if !c.resident || !c.used || usedBy(c.t, inputs) {
				continue
			}
			f.release(c)
		}
	}
}

func usedBy(p *ferry.Tensor, inputs []*ferry.Tensor) bool {
	for _, in := range inputs {
		if in != nil && in.Storage() == p.Storage() {
			return true
		}
	}
	return false
}

// BeginStep starts a step: the last step's order of uses is the one to
// prefetch by, and the first uses' gathers start.
func (f *FullShard) BeginStep() error {
	if !f.sharded {
		return errors.New("dist: FullShard.BeginStep: the parameters are not sharded (Shard)")
	}
	if len(f.uses) > 0 {
		f.order, f.uses = f.uses, f.order[:0]
	}
	f.pos, f.stepping = 0, true
	for j := 0; j < len(f.order) && j < f.prefetch; j++ {
		if next := f.order[j]; !next.resident && next.gather == nil {
			if err := f.startGather(next, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetReduce says whether the next backward reduce-scatters the gradients
// (the last micro-batch of a step) or leaves them to accumulate whole.
func (f *FullShard) SetReduce(reduce bool) { f.reduce = reduce }

// GradReady is backward's hook (ferry.BackwardOptions.GradReady): p's
// gradient is complete. p's gathered copy is freed, and, when this
// backward reduces, p's gradient is packed and the reduce-scatters whose
// turn has come start. Leaves that are not the FullShard's are ignored;
// an error is kept for Wait.
func (f *FullShard) GradReady(p *ferry.Tensor) {
	fp := f.byTensor[p]
	if fp == nil {
		return
	}
	if err := ferry.Catch(func() error { f.releaseParam(fp); return nil }); err != nil {
		f.noteErr(err)
	}
	if !f.reduce {
		return
	}
	if fp.ready {
		f.noteErr(fmt.Errorf("dist: FullShard: the gradient of parameter %d (%q) was reported twice in one step: call Wait after each reducing backward", fp.i, p.Name()))
		return
	}
	if err := f.pack(fp); err != nil {
		f.noteErr(err)
	}
	f.startReady()
	if f.beside != nil {
		f.land(false)
	}
}

func (f *FullShard) noteErr(err error) {
	if f.stepErr == nil {
		f.stepErr = err
	}
}

// pack copies fp's whole gradient (zeros if it has none) into its send
// buffer, padded to ranks × per, and frees the gradient.
func (f *FullShard) pack(fp *fsParam) error {
	if f.dc != nil {
		return f.packDevice(fp)
	}
	fp.ready = true
	fp.rsSend = f.buffer(f.c.Size() * fp.per)
	clear(fp.rsSend[fp.n:])
	g := fp.p.Grad()
	if g == nil {
		clear(fp.rsSend[:fp.n])
		return nil
	}
	defer fp.p.SetGrad(nil)
	if g.Numel() != fp.n || g.DType() != device.Float32 {
		clear(fp.rsSend[:fp.n])
		return fmt.Errorf("dist: FullShard: parameter %d (%q) has a gradient of shape %v %s, want %v float32", fp.i, fp.p.Name(), g.Shape(), g.DType(), fp.p.Shape())
	}
	if f.shared {
		return nil
	}
	return ferry.Catch(func() error { return g.Device().Kernels().Download(f32bytes(fp.rsSend[:fp.n]), g.View()) })
}

// startReady starts, in reverse parameter order, every reduce-scatter
// whose gradient is packed.
func (f *FullShard) startReady() {
	for f.rsNext < len(f.params) {
		fp := f.params[len(f.params)-1-f.rsNext]
		if !fp.ready {
			return
		}
		if f.dc != nil {
			f.reduceScatterDevice(fp)
			f.rsNext++
			continue
		}
		fp.rsRecv = f.buffer(fp.per)
		fp.rs = averaged(f.c, f.c.ReduceScatter(fp.rsSend, fp.rsRecv), fp.rsRecv)
		f.stats.ReduceScatters++
		f.stats.BytesScattered += 4 * int64(len(fp.rsSend))
		f.rsNext++
	}
}

// Wait finishes the step's reduction: it packs the gradients backward
// did not report (zeros for a parameter without one), starts the
// remaining reduce-scatters, waits for them all and writes each rank's
// part of the mean gradient into its shard's Grad. The gathered
// parameters are freed. Every rank calls it once per step; it returns
// the step's first error, and is ready for the next step either way.
func (f *FullShard) Wait() error {
	if !f.reduce && f.stepErr == nil {
		f.stepErr = errors.New("dist: FullShard.Wait: the step's last backward did not reduce (SetReduce(true) before it)")
	}
	for _, fp := range f.params {
		if !fp.ready {
			if e := f.pack(fp); e != nil {
				f.noteErr(e)
			}
		}
	}
	f.startReady()
	t0 := time.Now()
	if f.dc != nil {
		if e := f.finishDevice(); e != nil {
			f.noteErr(e)
		}
	}
	if f.beside != nil {
		f.land(true) // the steps of the shards left run beside
	}
	if f.dc == nil {
		for _, fp := range f.params {
			if e := f.finishGrad(fp); e != nil {
				f.noteErr(e)
			}
		}
	}
	f.stats.WaitTime += time.Since(t0)
	err := f.stepErr
	for _, fp := range f.params {
		f.put(fp.rsSend)
		f.put(fp.rsRecv)
		fp.rsSend, fp.rsRecv, fp.rs, fp.ready, fp.finished = nil, nil, nil, false, false
	}
	f.rsNext, f.stepErr, f.reduce = 0, nil, false
	if f.beside != nil {
		f.beside.landed = 0
	}
	if perr := f.releaseAll(); err == nil {
		err = perr
	}
	return err
}

// finishGrad waits for fp's reduce-scatter and writes this rank's part of
// the mean gradient into its shard's Grad (made, zero, if it has none,
// in host memory when the shards step beside the device; host path),
// once per step.
func (f *FullShard) finishGrad(fp *fsParam) error {
	if write, err := fp.land(); !write || err != nil {
		return err
	}
	return ferry.Catch(func() error {
		g := fp.shard.Grad()
		if g == nil {
			// Stepping beside the device, or the shards in host memory,
			// the optimizer's state is on the host, and so is the
			// gradient it reads: it stays where the reduce-scatter left
			// it, in host memory, and never takes device memory.
			on := fp.shard.Device()
			if f.beside != nil || f.onHost {
				on = on.Host()
				// Down after the reduce-scatter on the device path.
				if err := f.simulateLink(4*int64(fp.hi-fp.lo), false); err != nil {
					return err
				}
			}
			g = ferry.ZerosAs(on, device.Gradient, fp.hi-fp.lo)
			fp.shard.SetGrad(g)
		}
		if f.shared || fp.rsRecv == nil {
			return nil
		}
		if err := upload(g, fp.rsRecv[:fp.hi-fp.lo], "dist.reduce_scatter_gradients"); err != nil {
			return fmt.Errorf("dist: FullShard: writing the gradient of parameter %d (%q): %w", fp.i, fp.p.Name(), err)
		}
		return nil
	})
}

// releaseAll frees every gathered parameter (sharded only).
func (f *FullShard) releaseAll() error {
	if !f.sharded {
		return nil
	}
	return ferry.Catch(func() error {
		for _, fp := range f.params {
			for _, c := range fp.copies() {
				if c.gather != nil {
					_ = c.gather.Synchronize() // a prefetch no use came for
					f.dropGather(c)
				}
				f.release(c)
			}
		}
		return nil
	})
}

// EndStep ends a step after the optimizer's: no gathered parameter stays.
func (f *FullShard) EndStep() error {
	f.stepping = false
	return f.releaseAll()
}

// Settle waits for the shards' steps beside the device (SetStepBeside)
// and frees the parameters gathered outside a step (an evaluation's
// forwards on tapes without the record hook keep theirs until then).
func (f *FullShard) Settle() error {
	err := f.settleSteps()
	if e := f.releaseAll(); err == nil {
		err = e
	}
	return err
}

// GatherHost gathers every parameter's whole values into host memory on
// root, where Float32s then reads them without bringing the parameters
// to the device (HostData, ferry.HostReader): for a checkpoint that rank
// root writes while the parameters stay sharded. A collective (every
// rank sends its shards; only root keeps the values), undone by
// DropHost. On a device without values it does nothing.
func (f *FullShard) GatherHost(root int) error {
	if err := CheckRoot(root, f.c.Size()); err != nil {
		return err
	}
	if err := f.settleSteps(); err != nil {
		return err
	}
	if f.shared {
		return nil
	}
	err := ferry.Catch(func() error {
		size := f.c.Size()
		for _, fp := range f.params {
			if fp.n == 0 || fp.whole.resident {
				continue // a resident parameter is read where it is
			}
			send, recv := f.buffer(fp.per), f.buffer(size*fp.per)
			k := fp.hi - fp.lo
			if fp.shard != nil {
				if err := f.readShard(fp, send[:k]); err != nil {
					return err
				}
			}
			clear(send[k:])
			err := f.c.AllGather(send, recv).Synchronize()
			if err == nil && f.c.Rank() == root {
				fp.host = ferry.FromFloat32s(fp.p.Device().Host(), recv[:fp.n], fp.p.Shape()...)
			}
			f.put(send)
			f.put(recv)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.DropHost()
	}
	return err
}

// DropHost frees what GatherHost gathered.
func (f *FullShard) DropHost() {
	for _, fp := range f.params {
		if fp.host != nil {
			fp.host.Release()
			fp.host = nil
		}
	}
}

// HostData is the whole values of t's parameter in host memory, between
// GatherHost and DropHost on the root; nil otherwise. (ferry.HostReader.)
func (f *FullShard) HostData(t *ferry.Tensor) *ferry.Tensor {
	if c := f.byStore[t.Storage()]; c != nil && c == &c.fp.whole {
		return c.fp.host
	}
	return nil
}

// CheckParameters is GradientReducer.CheckParameters' counterpart, with
// nothing to compare: under ZeRO-3 no rank holds what another holds (each
// shard is one rank's alone), so it checks only that the ranks agree on
// the shards' layout, through an all-gather of the count of elements
// this rank holds per parameter. A collective.
func (f *FullShard) CheckParameters() error {
	mine := []float32{float32(len(f.params)), float32(f.ShardBytes() / 4 % (1 << 24))}
	all := make([]float32, 2*f.c.Size())
	if err := f.c.AllGather(mine, all).Synchronize(); err != nil {
		return err
	}
	for r := 1; r < f.c.Size(); r++ {
		if all[2*r] != all[0] {
			return fmt.Errorf("dist: ranks shard different models: rank 0 has %v parameters, rank %d has %v", all[0], r, all[2*r])
		}
	}
	return nil
}

// GradNorm is optim.GradNorm of the parameters' mean gradients, bit for
// bit, computed from the shards: each parameter's gradient is gathered
// whole, one at a time, and its float32 sum of squares computed as
// optim.GradNorm does; every rank gets the same norm. A collective, after
// Wait.
func (f *FullShard) GradNorm() (float64, error) {
	if f.beside != nil {
		return 0, errors.New("dist: FullShard.GradNorm: the shards step beside the device as their gradients land (SetStepBeside): no norm of all of them is taken first")
	}
	if f.dc != nil {
		return f.gradNormDevice()
	}
	var sumSq float64
	err := ferry.Catch(func() error {
		size := f.c.Size()
		for _, fp := range f.params {
			if fp.n == 0 {
				continue
			}
			send, recv := f.buffer(fp.per), f.buffer(size*fp.per)
			k := fp.hi - fp.lo
			if fp.shard != nil && !f.shared {
				if err := fp.shard.Device().Kernels().Download(f32bytes(send[:k]), fp.shard.Grad().View()); err != nil {
					return err
				}
			}
			clear(send[k:])
			err := f.c.AllGather(send, recv).Synchronize()
			if err == nil {
				g := ferry.ZerosAs(fp.p.Device(), device.Gradient, fp.p.Shape()...)
				if !f.shared {
					err = upload(g, recv[:fp.n], "dist.gather_gradient")
				}
				if err == nil {
					sq := ferry.Square(g)
					s := ferry.Sum(sq)
					if device.HasData(s.Device()) {
						sumSq += float64(s.Item())
					}
					sq.Release()
					s.Release()
				}
				g.Release()
			}
			f.put(send)
			f.put(recv)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return math.Sqrt(sumSq), err
}

// ClipGradNorm is optim.ClipGradNorm over the shards' gradients: the norm
// is GradNorm's (the whole gradients'), and each shard's gradient is
// scaled by the coefficient ClipGradNorm applies, elementwise, so the
// result is its bits on the whole gradients. A collective, after Wait.
func (f *FullShard) ClipGradNorm(maxNorm float64) (float64, error) {
	var grads []*ferry.Tensor
	for _, fp := range f.params {
		if fp.shard != nil && fp.shard.Grad() != nil {
			grads = append(grads, fp.shard)
		}
	}
	return clipGrads(maxNorm, f.GradNorm, grads)
}

// Close gives the parameters back whole (a collective when they are
// sharded) and frees the shards; the optimizer over them must be released
// first. Closing twice does nothing.
func (f *FullShard) Close() error {
	if f.closed {
		return nil
	}
	if err := f.SetStepBeside(nil); err != nil {
		return err
	}
	if err := f.Unshard(); err != nil {
		return err
	}
	f.closed = true
	for _, fp := range f.params {
		if fp.p.Pager() == f {
			fp.p.SetPager(nil)
		}
		if fp.low != nil {
			fp.low.t.Release() // paged out since Unshard
			fp.low = nil
		}
	}
	f.releaseShards()
	if f.side != nil {
		return f.side.Synchronize()
	}
	return nil
}

func (f *FullShard) releaseShards() {
	for _, fp := range f.params {
		if fp.shard != nil {
			fp.shard.SetGrad(nil)
			fp.shard.Release()
			fp.shard = nil
		}
		if fp.master != nil {
			fp.master.Release()
			fp.master = nil
		}
	}
}

// values is the tensor holding fp's shard's values: its host master
// (ShardsOnHost), or the shard.
func (fp *fsParam) values() *ferry.Tensor {
	if fp.master != nil {
		return fp.master
	}
	return fp.shard
}

// readShard copies fp's shard's values into dst (hi-lo elements): from
// its host master, written back first if the shard was brought to the
// device and changed there.
func (f *FullShard) readShard(fp *fsParam, dst []float32) error {
	if fp.master != nil {
		if err := f.syncMaster(fp); err != nil {
			return err
		}
	}
	v := fp.values()
	return v.Device().Kernels().Download(f32bytes(dst), v.View())
}

// syncMaster copies a resident shard changed on the device back into its
// host master.
func (f *FullShard) syncMaster(fp *fsParam) error {
	if fp.shard.PagedOut() || fp.shard.Version() == fp.masterVersion || f.shared {
		return nil
	}
	buf := f.buffer(fp.hi - fp.lo)
	defer f.put(buf)
	if err := fp.shard.Device().Kernels().Download(f32bytes(buf), fp.shard.View()); err != nil {
		return err
	}
	fp.masterVersion = fp.shard.Version()
	return upload(fp.master, buf, "dist.shard_to_host")
}

// dropShardCopy frees a shard's device copy (its master is then the
// values), after writing back a change made on the device.
func (f *FullShard) dropShardCopy(fp *fsParam) {
	if fp.shard.PagedOut() {
		return
	}
	if err := f.syncMaster(fp); err != nil {
		panic(err)
	}
	fp.shard.PageOut()
}

// HostCopy is the host master of shard, a shard in host memory
// (ShardsOnHost), its device copy freed (written back first if changed):
// an optimizer with its state on the host updates it in place
// (optim.HostCopier). Nil for another tensor.
func (f *FullShard) HostCopy(shard *ferry.Tensor) (*ferry.Tensor, error) {
	fp := f.masters[shard.Storage()]
	if fp == nil {
		return nil, nil
	}
	err := ferry.Catch(func() error { f.dropShardCopy(fp); return nil })
	return fp.master, err
}

// pageInShard brings a shard in host memory to the device for what reads
// it there (a device optimizer's step), from its master; HostCopy, a
// gather or Shard write it back and free it.
func (f *FullShard) pageInShard(fp *fsParam) error {
	b, err := f.dev.Allocator().Alloc(fp.shard.PagedBytes(), device.Parameter)
	if err != nil {
		return err
	}
	fp.shard.InstallBlock(b)
	err = ferry.Catch(func() error {
		if f.shared {
			return nil
		}
		buf := f.buffer(fp.hi - fp.lo)
		defer f.put(buf)
		if err := fp.master.Device().Kernels().Download(f32bytes(buf), fp.master.View()); err != nil {
			return err
		}
		return f.dev.Kernels().Upload(fp.shard.View(), f32bytes(buf))
	})
	if err != nil {
		fp.shard.PageOut()
		return err
	}
	fp.masterVersion = fp.shard.Version()
	return nil
}

// clipGrads is optim.ClipGradNorm for gradients sharded across ranks:
// norm (a collective) is the whole gradients' norm, and the gradients of
// params, this rank's, are scaled by ClipGradNorm's coefficient. A
// non-finite norm is an error on every rank alike.
func clipGrads(maxNorm float64, norm func() (float64, error), params []*ferry.Tensor) (float64, error) {
	if !(maxNorm > 0) || math.IsInf(maxNorm, 1) {
		return 0, fmt.Errorf("dist: ClipGradNorm: max norm must be positive and finite, got %v", maxNorm)
	}
	n, err := norm()
	if err != nil {
		return n, err
	}
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return n, fmt.Errorf("dist: ClipGradNorm: the gradients' norm is %v", n)
	}
	return n, scaleGrads(params, maxNorm, n)
}

// scaleGrads scales the gradients of params by the coefficient
// optim.ClipGradNorm applies for maxNorm at norm (none when it is 1 or
// more), in place.
func scaleGrads(params []*ferry.Tensor, maxNorm, norm float64) error {
	coef := maxNorm / (norm + 1e-6)
	if coef >= 1 {
		return nil
	}
	return ferry.Catch(func() error {
		for _, p := range params {
			if g := p.Grad(); g != nil {
				g.ScaleInPlace(float32(coef))
			}
		}
		return nil
	})
}
