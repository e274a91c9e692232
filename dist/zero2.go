package dist

import (
	"fmt"
	"math"
	"slices"
	"time"

	"ferry"
	"ferry/device"
)

// GradientScatterer is ZeRO stage 2's gradient reduction: like a
// GradientReducer it packs gradients into buckets as backward completes
// them and starts each bucket's collective at once, but each rank keeps
// only the averaged gradients of the parameters it owns. Everywhere else
// the gradient is dropped from the device as soon as it is packed, during
// backward, so a rank holds about 1/Size of the gradients after it.
//
// Ownership (ScatterOwners) is of whole parameters, as for ZeRO-1, but
// chosen bucket by bucket so that each bucket splits evenly among the
// ranks, while no rank owns more than a 1/Size share (or the largest
// parameter) and 5% more. A bucket is laid out as Size equal blocks, block
// r holding rank r's parameters in the bucket (padded with zeros to the
// largest block), and reduce-scattered, so rank r receives only its
// block. A bucket whose blocks are still too unequal (a parameter larger
// than the bucket's share) would send more than an all-reduce's twice the
// bucket; such a bucket is all-reduced instead and each rank keeps its
// part (BucketsAllReduced counts them): the memory is ZeRO-2's, the
// traffic ZeRO-1's. GPT-2 124M with 25 MiB buckets: 2 ranks own 261 and
// 237 MB (AssignOwners: 249 and 249), every bucket reduce-scattered; 4
// ranks 157, 116, 112 and 113 MB, 16 of 17 buckets reduce-scattered; 8
// ranks, every bucket all-reduced (a bucket holds about one block's five
// large matrices).
//
// Pair it with a ShardedOptimizer built with ShardOptions{Owners:
// s.Owners()}. The norm for clipping then needs every rank's part:
// ShardedOptimizer.ClipGradNorm. One step, on every rank:
//
//	err := loss.BackwardWith(ferry.BackwardOptions{GradReady: s.GradReady})
//	err = s.Wait()                     // owned gradients averaged; others nil
//	norm, err := opt.ClipGradNorm(max) // or opt.GradNorm()
//	err = opt.Step()                   // owned parameters, then broadcast
//	opt.ZeroGrad()
//
// Summing in a reduce-scatter is the same as in an all-reduce for
// NewGroup's ranks and for two MPI ranks (a+b = b+a exactly), so the
// result equals a GradientReducer's bit for bit there; with more MPI
// ranks it depends on Open MPI's algorithms.
type GradientScatterer struct {
	c       Comm
	params  []*ferry.Tensor
	index   map[*ferry.Tensor]int
	owner   []int
	slots   []scatterSlot
	buckets []*scatterBucket
	next    int
	stepErr error
	stats   ScattererStats
	// dc, side, dev: the buckets on the device (ReducerOptions.Device),
	// reduced on the side stream; nil for the host path.
	dc   DeviceComm
	side device.Stream
	dev  device.Device
}

type scatterSlot struct {
	bucket, off int // off: in the bucket's send buffer
	packed      bool
}

type scatterBucket struct {
	params    []int
	allReduce bool
	block     int       // elements per rank block (reduce-scatter)
	send      []float32 // Size × block, or the bucket's elements when all-reduced
	recv      []float32 // block (reduce-scatter); nil when all-reduced
	pending   int
	ev        device.Event
	// dsend and drecv are send and recv on the device (ReducerOptions.Device).
	dsend, drecv *ferry.Tensor
}

// ScattererStats describe the steps a GradientScatterer has reduced.
type ScattererStats struct {
	Steps             int
	Buckets           int
	BucketsAllReduced int           // buckets too unbalanced to reduce-scatter
	BytesSent         int64         // send-buffer bytes, all steps
	PaddingBytes      int64         // of which padding, per step
	WaitTime          time.Duration // all steps
}

// NewGradientScatterer prepares buckets and ownership for params (float32
// tensors that require grad; repeats dropped) on c. opts.BucketBytes
// bounds a bucket's gradient bytes as for a GradientReducer.
func NewGradientScatterer(c Comm, params []*ferry.Tensor, opts ReducerOptions) (*GradientScatterer, error) {
	capBytes := opts.BucketBytes
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 0 {
		return nil, fmt.Errorf("dist: NewGradientScatterer: BucketBytes %d is negative", capBytes)
	}
	s := &GradientScatterer{c: c, index: map[*ferry.Tensor]int{}}
	for _, p := range params {
		if _, dup := s.index[p]; dup {
			continue
		}
		if p.DType() != device.Float32 {
			return nil, fmt.Errorf("dist: NewGradientScatterer: parameter %d (%q) is %s; gradients are reduced as float32", len(s.params), p.Name(), p.DType())
		}
		if !p.RequiresGrad() {
			return nil, fmt.Errorf("dist: NewGradientScatterer: parameter %d (%q) does not require grad", len(s.params), p.Name())
		}
		s.index[p] = len(s.params)
		s.params = append(s.params, p)
	}
	n := c.Size()
	groups, owner, blocks := scatterLayout(s.params, n, capBytes)
	s.owner = owner
	s.slots = make([]scatterSlot, len(s.params))
	bufs, recvs := newBuffers(s.params), newBuffers(s.params) // sends, receives
	for bi, g := range groups {
		b := &scatterBucket{params: g, block: blocks[bi]}
		s.buckets = append(s.buckets, b)
		total := 0
		for _, i := range g {
			total += s.params[i].Numel()
		}
		// Reduce-scatter sends n·block; an all-reduce moves about twice
		// the bucket. Take the cheaper.
		b.allReduce = n > 1 && n*b.block > 2*total
		off := make([]int, n)
		if b.allReduce {
			acc := 0
			for _, i := range b.params {
				s.slots[i] = scatterSlot{bucket: bi, off: acc}
				acc += s.params[i].Numel()
			}
			b.send = bufs.get(total)
			s.stats.BucketsAllReduced++
		} else {
			for r := range off {
				off[r] = r * b.block
			}
			for _, i := range b.params { // in bucket order within each block
				r := s.owner[i]
				s.slots[i] = scatterSlot{bucket: bi, off: off[r]}
				off[r] += s.params[i].Numel()
			}
			b.send = bufs.get(n * b.block)
			b.recv = recvs.get(b.block)
			s.stats.PaddingBytes += int64(n*b.block-total) * 4
		}
		b.pending = len(b.params)
	}
	for _, b := range s.buckets {
		b.send = bufs.final(b.send)
		if b.recv != nil {
			b.recv = recvs.final(b.recv)
		}
	}
	s.stats.Buckets = len(s.buckets)
	if opts.Device != nil {
		if err := s.onDevice(opts.Device); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// onDevice moves the buckets to the parameters' device, each send and
// recv a device tensor of the host buffer's size, reduced through dc.
func (s *GradientScatterer) onDevice(dc DeviceComm) error {
	if len(s.params) == 0 {
		return fmt.Errorf("dist: NewGradientScatterer: no parameters to reduce on the device")
	}
	if dc.Size() != s.c.Size() || dc.Rank() != s.c.Rank() {
		return fmt.Errorf("dist: NewGradientScatterer: the device communicator is rank %d of %d, the Comm rank %d of %d", dc.Rank(), dc.Size(), s.c.Rank(), s.c.Size())
	}
	dev := s.params[0].Device()
	side, err := dev.NewStream("collectives")
	if err != nil {
		return fmt.Errorf("dist: NewGradientScatterer: %w", err)
	}
	s.dc, s.side, s.dev = dc, side, dev
	return ferry.Catch(func() error {
		for _, b := range s.buckets {
			b.dsend = ferry.ZerosAs(dev, device.Gradient, max(len(b.send), 1))
			if b.recv != nil {
				b.drecv = ferry.ZerosAs(dev, device.Gradient, max(len(b.recv), 1))
			}
			b.send, b.recv = nil, nil
		}
		return nil
	})
}

// ScatterOwners is the owning rank of each of params (deduplicated, in
// order) that NewGradientScatterer assigns on ranks ranks with buckets of
// bucketBytes (0: DefaultBucketBytes), without making the buckets: for a
// planner that needs to know a rank's share.
func ScatterOwners(params []*ferry.Tensor, ranks int, bucketBytes int64) []int {
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	var uniq []*ferry.Tensor
	seen := map[*ferry.Tensor]bool{}
	for _, p := range params {
		if !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	_, owner, _ := scatterLayout(uniq, ranks, bucketBytes)
	return owner
}

// scatterLayout cuts params (deduplicated) into buckets in reverse order
// of at most capBytes (a larger parameter alone) and chooses owners
// balanced within each bucket, for the reduce-scatter's padding, under a
// cap on each rank's total, for its memory. It returns the buckets'
// parameter indices, each parameter's owner, and each bucket's largest
// rank block in elements.
func scatterLayout(params []*ferry.Tensor, n int, capBytes int64) (groups [][]int, owner []int, blocks []int) {
	owner = make([]int, len(params))
	var curBytes int64
	for i := len(params) - 1; i >= 0; i-- {
		b := int64(params[i].Numel()) * 4
		if len(groups) == 0 || (curBytes > 0 && curBytes+b > capBytes) {
			groups = append(groups, nil)
			curBytes = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], i)
		curBytes += b
	}
	// Each rank may own up to cap elements: a 1/n share, or the largest
	// parameter if that is more, and 5% of a share to spare. Buckets
	// holding larger parameters are placed first; within a bucket, the
	// largest parameter first to the rank with the fewest of the bucket's
	// elements among those under the cap (all ranks if none is), then the
	// fewest overall, then the lowest.
	var total, largest int64
	maxIn := make([]int, len(groups))
	for gi, g := range groups {
		for _, i := range g {
			k := params[i].Numel()
			total += int64(k)
			largest = max(largest, int64(k))
			maxIn[gi] = max(maxIn[gi], k)
		}
	}
	share := (total + int64(n) - 1) / int64(n)
	limit := max(share, largest) + share/20
	order := make([]int, len(groups))
	for gi := range order {
		order[gi] = gi
	}
	slices.SortStableFunc(order, func(x, y int) int { return maxIn[y] - maxIn[x] })
	owner = make([]int, len(params))
	global := make([]int64, n)
	blocks = make([]int, len(groups))
	for _, gi := range order {
		ps := slices.Clone(groups[gi])
		slices.SortStableFunc(ps, func(x, y int) int { return params[y].Numel() - params[x].Numel() })
		load := make([]int, n)
		for _, i := range ps {
			k := params[i].Numel()
			r := -1
			for pass := 0; pass < 2 && r < 0; pass++ {
				for q := 0; q < n; q++ {
					if pass == 0 && global[q]+int64(k) > limit {
						continue
					}
					if r < 0 || load[q] < load[r] || (load[q] == load[r] && global[q] < global[r]) {
						r = q
					}
				}
			}
			owner[i] = r
			load[r] += k
			global[r] += int64(k)
		}
		blocks[gi] = slices.Max(load)
	}
	return groups, owner, blocks
}

// Comm is the communicator.
func (s *GradientScatterer) Comm() Comm { return s.c }

// Owners is the owning rank of each parameter (deduplicated, in order),
// for ShardOptions.Owners.
func (s *GradientScatterer) Owners() []int { return slices.Clone(s.owner) }

// Stats returns the counters.
func (s *GradientScatterer) Stats() ScattererStats { return s.stats }

// GradReady is the ferry.BackwardOptions.GradReady hook: it packs p's
// gradient into its bucket, drops it from the device if another rank owns
// p, and starts the buckets that are complete, in order. Errors are kept
// for Wait.
func (s *GradientScatterer) GradReady(p *ferry.Tensor) {
	i, ok := s.index[p]
	if !ok {
		return
	}
	if err := s.pack(i); err != nil && s.stepErr == nil {
		s.stepErr = err
	}
	s.startReady()
}

// Chain returns a GradReady hook that calls s's and then next (may be
// nil).
func (s *GradientScatterer) Chain(next func(*ferry.Tensor)) func(*ferry.Tensor) {
	if next == nil {
		return s.GradReady
	}
	return func(p *ferry.Tensor) { s.GradReady(p); next(p) }
}

func (s *GradientScatterer) pack(i int) error {
	sl := &s.slots[i]
	p := s.params[i]
	if sl.packed {
		return fmt.Errorf("dist: GradientScatterer: the gradient of parameter %d (%q) was reported twice in one step: call Wait after each backward", i, p.Name())
	}
	b := s.buckets[sl.bucket]
	sl.packed = true
	b.pending--
	g := p.Grad()
	if s.owner[i] != s.c.Rank() {
		defer p.SetGrad(nil) // another rank's: off the device now
	}
	if s.dc != nil {
		return s.packDevice(i, b, g)
	}
	dst := b.send[sl.off : sl.off+p.Numel()]
	if g == nil {
		clear(dst)
		return nil
	}
	if g.Numel() != p.Numel() || g.DType() != device.Float32 {
		clear(dst)
		return fmt.Errorf("dist: GradientScatterer: parameter %d (%q) has a gradient of shape %v %s, want %v float32", i, p.Name(), g.Shape(), g.DType(), p.Shape())
	}
	return ferry.Catch(func() error {
		return g.Device().Kernels().Download(f32bytes(dst), g.View())
	})
}

func (s *GradientScatterer) startReady() {
	for s.next < len(s.buckets) && s.buckets[s.next].pending == 0 {
		b := s.buckets[s.next]
		if s.dc != nil {
			s.startDevice(b)
			s.next++
			continue
		}
		if b.allReduce {
			b.ev = AllReduceAverage(s.c, b.send)
		} else {
			b.ev = averaged(s.c, s.c.ReduceScatter(b.send, b.recv), b.recv)
		}
		s.stats.BytesSent += int64(len(b.send)) * 4
		s.next++
	}
}

// Wait finishes the step: it packs what backward did not report, starts
// the remaining buckets, waits, and leaves in each owned parameter's Grad
// the gradient averaged over ranks (a zero gradient if no rank had one);
// every other parameter's Grad is nil. Every rank calls it once per step.
func (s *GradientScatterer) Wait() error {
	err := s.stepErr
	for i := range s.slots {
		if !s.slots[i].packed {
			if e := s.pack(i); e != nil && err == nil {
				err = e
			}
		}
	}
	s.startReady()
	t0 := time.Now()
	for _, b := range s.buckets {
		if s.dc != nil {
			s.dev.Compute().Wait(b.ev)
		} else if e := b.ev.Synchronize(); e != nil && err == nil {
			err = e
		}
	}
	s.stats.WaitTime += time.Since(t0)
	if err == nil && s.dc != nil {
		err = s.unpackOwnedDevice()
	} else if err == nil {
		err = s.unpackOwned()
	}
	for i := range s.slots {
		s.slots[i].packed = false
	}
	for _, b := range s.buckets {
		b.pending, b.ev = len(b.params), nil
	}
	s.next, s.stepErr = 0, nil
	s.stats.Steps++
	return err
}

func (s *GradientScatterer) unpackOwned() error {
	me := s.c.Rank()
	return ferry.Catch(func() error {
		for i, p := range s.params {
			if s.owner[i] != me {
				continue
			}
			sl := s.slots[i]
			b := s.buckets[sl.bucket]
			var src []float32
			if b.allReduce {
				src = b.send[sl.off : sl.off+p.Numel()]
			} else {
				o := sl.off - me*b.block
				src = b.recv[o : o+p.Numel()]
			}
			g := p.Grad()
			if g == nil {
				g = ferry.ZerosAs(p.Device(), device.Gradient, p.Shape()...)
				p.SetGrad(g)
			}
			if err := upload(g, src, "dist.scatter_gradients"); err != nil {
				return fmt.Errorf("dist: GradientScatterer: writing the gradient of parameter %d (%q): %w", i, p.Name(), err)
			}
		}
		return nil
	})
}

// Broadcast copies root's parameter values to every rank (bucket by
// bucket, through the send buffers). Call it on every rank, outside a
// step.
func (s *GradientScatterer) Broadcast(root int) error {
	if s.dc != nil {
		return broadcastOnDevice(s.dc, s.side, s.params, root)
	}
	return ferry.Catch(func() error {
		for _, b := range s.buckets {
			buf := b.send
			off := 0
			for _, i := range b.params {
				p := s.params[i]
				if err := p.Device().Kernels().Download(f32bytes(buf[off:off+p.Numel()]), p.View()); err != nil {
					return err
				}
				off += p.Numel()
			}
			if err := s.c.Broadcast(buf[:off], root).Synchronize(); err != nil {
				return err
			}
			off = 0
			for _, i := range b.params {
				p := s.params[i]
				if err := upload(p, buf[off:off+p.Numel()], "dist.broadcast_parameters"); err != nil {
					return err
				}
				off += p.Numel()
			}
		}
		return nil
	})
}

// CheckParameters is GradientReducer.CheckParameters for these
// parameters: nil on every rank, or an error naming the first parameter
// that is not bit-identical across ranks.
func (s *GradientScatterer) CheckParameters() error {
	return (&GradientReducer{c: s.c, params: s.params}).CheckParameters()
}

// GradNorm is the global L2 norm of the parameters' gradients when each
// rank holds only the gradients of the parameters it owns: each owner
// computes its parameters' sums of squares (in float32, as optim.GradNorm
// does), the ranks all-reduce them (adding zeros, exactly), and every
// rank adds them in parameter order in float64. The result is bit for
// bit optim.GradNorm of the whole gradient, on every rank. A collective.
func (s *ShardedOptimizer) GradNorm() (float64, error) {
	me := s.c.Rank()
	sq := make([]float32, len(s.params))
	has := make([]float32, len(s.params))
	err := ferry.Catch(func() error {
		for i, p := range s.params {
			g := p.Grad()
			if s.owner[i] != me || g == nil {
				continue
			}
			t := ferry.Square(g)
			sum := ferry.Sum(t)
			sq[i], has[i] = sum.Item(), 1
			t.Release()
			sum.Release()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if s.c.Size() > 1 {
		buf := append(sq, has...)
		if err := s.c.AllReduce(buf).Synchronize(); err != nil {
			return 0, err
		}
		sq, has = buf[:len(s.params)], buf[len(s.params):]
	}
	var sumSq float64
	for i := range sq {
		if has[i] != 0 {
			sumSq += float64(sq[i])
		}
	}
	return math.Sqrt(sumSq), nil
}

// ClipGradNorm is optim.ClipGradNorm over sharded gradients (each rank
// holding its owned parameters' gradients, as after
// GradientScatterer.Wait): the norm from GradNorm, then each rank scales
// its own gradients. It equals optim.ClipGradNorm on the whole gradient
// bit for bit. A collective; a non-finite norm is an error on every rank.
func (s *ShardedOptimizer) ClipGradNorm(maxNorm float64) (float64, error) {
	var owned []*ferry.Tensor
	for i, p := range s.params {
		if s.owner[i] == s.c.Rank() {
			owned = append(owned, p)
		}
	}
	return clipGrads(maxNorm, s.GradNorm, owned)
}
