package dist

import (
	"fmt"
	"time"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/internal/digest"
)

// DefaultBucketBytes is the gradient bytes per all-reduce when
// ReducerOptions.BucketBytes is 0: 25 MiB, PyTorch DDP's bucket_cap_mb.
const DefaultBucketBytes = 25 << 20

// ReducerOptions configure a GradientReducer. The zero value asks for the
// defaults.
type ReducerOptions struct {
	// BucketBytes bounds the gradient bytes packed into one all-reduce
	// (a parameter larger than it gets a bucket of its own); 0 means
	// DefaultBucketBytes.
	BucketBytes int64
	// Device, for a GradientScatterer, is a communicator of the same ranks
	// on the parameters' device (NCCL): its buckets then live on the
	// device and are reduced there, on a side stream. (A GradientReducer
	// refuses it: NewDeviceReducer is that reducer on the device.)
	Device DeviceComm
}

// GradientReducer averages the gradients of a set of parameters over the
// ranks of a Comm, for data-parallel training: each rank runs forward and
// backward on its own share of the batch, and after Wait every rank holds
// the gradient of the whole batch (the mean of the ranks' gradients, which
// for a loss that is a mean over the batch is the gradient of the
// concatenated batch).
//
// Gradients are packed, as backward completes them, into buckets of about
// BucketBytes; a bucket's all-reduce starts as soon as its last gradient
// is in, so communication overlaps the rest of backward (PyTorch DDP's
// design). Buckets hold parameters in reverse order, since backward
// produces the last layers' gradients first, and start in bucket order on
// every rank, which is what keeps the ranks' collectives matched.
//
// One step, on every rank (see GradReady and Wait):
//
//	opts := ferry.BackwardOptions{GradReady: r.GradReady}
//	err := loss.BackwardWith(opts) // buckets start during backward
//	err = r.Wait()                 // gradients now averaged over ranks
//	opt.Step(); opt.ZeroGrad()
//
// Not with optim.InBackward: an update inside backward would use the
// rank's own gradient, before the average. With gradient accumulation,
// hook only the last micro-batch's backward.
//
// A GradientReducer is used from the goroutine that runs backward.
type GradientReducer struct {
	c       Comm
	params  []*ferry.Tensor
	index   map[*ferry.Tensor]int
	slots   []slot // per parameter
	buckets []*bucket
	next    int // buckets[:next] have started this step
	stepErr error
	stats   ReducerStats
}

type slot struct {
	bucket, off int // in elements
	packed      bool
}

type bucket struct {
	params  []int // indices into params
	buf     []float32
	pending int // parameters not yet packed this step
	ev      device.Event
}

// ReducerStats describe the steps a GradientReducer has reduced.
type ReducerStats struct {
	Steps            int
	Buckets          int           // buckets per step
	BytesReduced     int64         // gradient bytes all-reduced, all steps
	StartedInReverse int64         // buckets started from GradReady, during backward
	StartedAtWait    int64         // buckets started by Wait (backward did not complete them)
	WaitTime         time.Duration // time Wait spent waiting for all-reduces, all steps
}

// NewGradientReducer prepares buckets for params (float32 tensors that
// require grad; duplicates are reduced once) on c.
func NewGradientReducer(c Comm, params []*ferry.Tensor, opts ReducerOptions) (*GradientReducer, error) {
	capBytes := opts.BucketBytes
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 0 {
		return nil, fmt.Errorf("dist: NewGradientReducer: BucketBytes %d is negative", capBytes)
	}
	if opts.Device != nil {
		return nil, fmt.Errorf("dist: NewGradientReducer: ReducerOptions.Device is for a GradientScatterer; NewDeviceReducer reduces on the device")
	}
	r := &GradientReducer{c: c, index: map[*ferry.Tensor]int{}}
	for _, p := range params {
		if _, dup := r.index[p]; dup {
			continue
		}
		if p.DType() != device.Float32 {
			return nil, fmt.Errorf("dist: NewGradientReducer: parameter %d (%q) is %s; gradients are reduced as float32", len(r.params), p.Name(), p.DType())
		}
		if !p.RequiresGrad() {
			return nil, fmt.Errorf("dist: NewGradientReducer: parameter %d (%q) does not require grad", len(r.params), p.Name())
		}
		r.index[p] = len(r.params)
		r.params = append(r.params, p)
	}
	var members [][]int
	r.slots, members = bucketLayout(r.params, capBytes)
	for _, m := range members {
		r.buckets = append(r.buckets, &bucket{params: m})
	}
	bufs := newBuffers(r.params)
	for _, b := range r.buckets {
		n := 0
		for _, i := range b.params {
			n += r.params[i].Numel()
		}
		b.buf = bufs.get(n)
		b.pending = len(b.params)
	}
	for _, b := range r.buckets {
		b.buf = bufs.final(b.buf)
	}
	r.stats.Buckets = len(r.buckets)
	return r, nil
}

// bucketLayout packs params into buckets of at most capBytes (a larger
// parameter alone), in reverse order, since backward completes the last
// layers' gradients first: each parameter's slot (its bucket and offset
// in elements) and each bucket's parameters, in packing order.
func bucketLayout(params []*ferry.Tensor, capBytes int64) (slots []slot, buckets [][]int) {
	slots = make([]slot, len(params))
	var curBytes int64
	for i := len(params) - 1; i >= 0; i-- {
		n := params[i].Numel()
		if len(buckets) == 0 || (curBytes > 0 && curBytes+int64(n)*4 > capBytes) {
			buckets = append(buckets, nil)
			curBytes = 0
		}
		slots[i] = slot{bucket: len(buckets) - 1, off: int(curBytes / 4)}
		buckets[len(buckets)-1] = append(buckets[len(buckets)-1], i)
		curBytes += int64(n) * 4
	}
	return slots, buckets
}

// Comm is the communicator the reducer reduces over.
func (r *GradientReducer) Comm() Comm { return r.c }

// Stats returns the reducer's counters.
func (r *GradientReducer) Stats() ReducerStats { return r.stats }

// Buckets lists, per bucket in the order they start, the parameters it
// holds (indices into the deduplicated parameter list).
func (r *GradientReducer) Buckets() [][]int {
	out := make([][]int, len(r.buckets))
	for i, b := range r.buckets {
		out[i] = append([]int(nil), b.params...)
	}
	return out
}

// GradReady is the ferry.BackwardOptions.GradReady hook: backward calls it
// on its own goroutine when p's gradient for this backward is complete. It
// copies the gradient into p's bucket and, when that completes the next
// buckets in order, starts their all-reduce. Leaves that are not the
// reducer's parameters are ignored. An error (a second backward before
// Wait, a gradient of the wrong shape) is kept and returned by Wait.
func (r *GradientReducer) GradReady(p *ferry.Tensor) {
	i, ok := r.index[p]
	if !ok {
		return
	}
	if err := r.pack(i); err != nil {
		r.noteErr(err)
		return
	}
	r.startReady(false)
}

// Chain returns a GradReady hook that calls r's and then next (which may
// be nil): for a caller that needs its own grad-ready callback too.
func (r *GradientReducer) Chain(next func(*ferry.Tensor)) func(*ferry.Tensor) {
	if next == nil {
		return r.GradReady
	}
	return func(p *ferry.Tensor) { r.GradReady(p); next(p) }
}

// noteErr keeps the first error of the step, for Wait to return.
func (r *GradientReducer) noteErr(err error) {
	if r.stepErr == nil {
		r.stepErr = err
	}
}

func (r *GradientReducer) pack(i int) error {
	s := &r.slots[i]
	p := r.params[i]
	if s.packed {
		return fmt.Errorf("dist: GradientReducer: the gradient of parameter %d (%q) was reported twice in one step: call Wait after each backward", i, p.Name())
	}
	b := r.buckets[s.bucket]
	s.packed = true
	b.pending--
	dst := b.buf[s.off : s.off+p.Numel()]
	g := p.Grad()
	if g == nil {
		clear(dst) // an unused parameter contributes zeros
		return nil
	}
	if g.Numel() != p.Numel() || g.DType() != device.Float32 {
		clear(dst)
		return fmt.Errorf("dist: GradientReducer: parameter %d (%q) has a gradient of shape %v %s, want %v float32", i, p.Name(), g.Shape(), g.DType(), p.Shape())
	}
	return ferry.Catch(func() error {
		return g.Device().Kernels().Download(f32bytes(dst), g.View())
	})
}

// startReady starts, in bucket order, every bucket whose gradients are all
// packed.
func (r *GradientReducer) startReady(atWait bool) {
	for r.next < len(r.buckets) && r.buckets[r.next].pending == 0 {
		b := r.buckets[r.next]
		b.ev = AllReduceAverage(r.c, b.buf)
		r.stats.BytesReduced += int64(len(b.buf)) * 4
		if atWait {
			r.stats.StartedAtWait++
		} else {
			r.stats.StartedInReverse++
		}
		r.next++
	}
}

// Wait finishes the step: it packs what backward did not report (a
// gradient set without the hook, or zeros for a parameter that got none),
// starts the remaining buckets, waits for every all-reduce, and writes the
// averaged gradients back into each parameter's Grad (creating a zero
// gradient first for a parameter that had none here but some elsewhere).
// Every rank must call it once per step. It returns the step's first
// error; the reducer is then ready for the next step either way.
func (r *GradientReducer) Wait() error {
	err := r.stepErr
	for i := range r.slots {
		if !r.slots[i].packed {
			if e := r.pack(i); e != nil && err == nil {
				err = e
			}
		}
	}
	r.startReady(true)
	t0 := time.Now()
	for _, b := range r.buckets {
		if e := b.ev.Synchronize(); e != nil && err == nil {
			err = e
		}
	}
	r.stats.WaitTime += time.Since(t0)
	if err == nil {
		err = r.unpackAll()
	}
	for i := range r.slots {
		r.slots[i].packed = false
	}
	for _, b := range r.buckets {
		b.pending, b.ev = len(b.params), nil
	}
	r.next, r.stepErr = 0, nil
	r.stats.Steps++
	return err
}

func (r *GradientReducer) unpackAll() error {
	return ferry.Catch(func() error {
		for i, p := range r.params {
			s := r.slots[i]
			src := r.buckets[s.bucket].buf[s.off : s.off+p.Numel()]
			g := p.Grad()
			if g == nil {
				g = ferry.ZerosAs(p.Device(), device.Gradient, p.Shape()...)
				p.SetGrad(g)
			}
			if err := upload(g, src, "dist.reduce_gradients"); err != nil {
				return fmt.Errorf("dist: GradientReducer: writing the gradient of parameter %d (%q): %w", i, p.Name(), err)
			}
		}
		return nil
	})
}

func upload(t *ferry.Tensor, src []float32, op string) error {
	if !t.IsContiguous() {
		return fmt.Errorf("%s is not contiguous", op)
	}
	if err := t.Device().Kernels().Upload(t.View(), f32bytes(src)); err != nil {
		return err
	}
	ferry.BumpVersion(t, op)
	return nil
}

// Broadcast copies root's parameter values to every rank, so that ranks
// start from identical weights. Call it on every rank, outside a step.
func (r *GradientReducer) Broadcast(root int) error {
	return ferry.Catch(func() error {
		for _, b := range r.buckets {
			for _, i := range b.params {
				p, s := r.params[i], r.slots[i]
				if err := p.Device().Kernels().Download(f32bytes(b.buf[s.off:s.off+p.Numel()]), p.View()); err != nil {
					return err
				}
			}
			if err := r.c.Broadcast(b.buf, root).Synchronize(); err != nil {
				return err
			}
			for _, i := range b.params {
				p, s := r.params[i], r.slots[i]
				if err := upload(p, b.buf[s.off:s.off+p.Numel()], "dist.broadcast_parameters"); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// CheckParameters is a debugging check that the parameters are bit for
// bit the same on every rank, as data parallelism keeps them: it hashes
// each parameter (FNV-1a over its float32 bits) and all-gathers the
// hashes. Every rank gets the same answer: nil, or an error naming the
// first parameter that differs and the ranks that disagree with rank 0.
// Call it on every rank, outside a step.
func (r *GradientReducer) CheckParameters() error {
	mine, err := paramHashes(r.params)
	if err != nil {
		return err
	}
	all := make([]float32, len(mine)*r.c.Size())
	if err := r.c.AllGather(mine, all).Synchronize(); err != nil {
		return err
	}
	return compareHashes(r.params, all, r.c.Size())
}

// hashWords is how many float32s carry a parameter's 64-bit hash: four
// 16-bit integers, each exact in float32.
const hashWords = 4

// paramHashes is each parameter's FNV-1a hash over its float32 bits, as
// hashWords float32s a parameter.
func paramHashes(params []*ferry.Tensor) ([]float32, error) {
	mine := make([]float32, hashWords*len(params))
	err := ferry.Catch(func() error {
		for i, p := range params {
			h := digest.NewFNV64a()
			h.Write(f32bytes(p.Float32s()))
			v := h.Sum64()
			for k := range hashWords {
				mine[hashWords*i+k] = float32(uint16(v >> (16 * k)))
			}
		}
		return nil
	})
	return mine, err
}

// compareHashes checks every rank's hashes (all: paramHashes of each rank,
// in rank order) against rank 0's and names the first parameter that
// differs and the ranks that disagree.
func compareHashes(params []*ferry.Tensor, all []float32, ranks int) error {
	per := hashWords * len(params)
	for i, p := range params {
		var bad []int
		for rank := 1; rank < ranks; rank++ {
			for k := range hashWords {
				if all[rank*per+hashWords*i+k] != all[hashWords*i+k] {
					bad = append(bad, rank)
					break
				}
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("dist: parameters differ across ranks: parameter %d (%q, shape %v) on rank(s) %v is not bit-identical to rank 0's", i, p.Name(), p.Shape(), bad)
		}
	}
	return nil
}

func f32bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*4)
}

// u16s is v's memory as twice as many uint16s (bfloat16 bits, two to a
// float32 word, in the machine's order, as the device lays them out).
func u16s(v []float32) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*2)
}
