package dist

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/optim"
)

// AssignOwners splits params among ranks for sharded optimizer state
// (ZeRO): whole parameters, the largest first, each to the rank that holds
// the fewest elements so far (the lowest such rank on a tie). The result,
// owner[i] for params[i], depends only on the parameters' sizes and order,
// so every rank computes the same assignment. Repeated parameters (a tied
// weight listed twice) belong to the owner of their first listing.
func AssignOwners(params []*ferry.Tensor, ranks int) []int {
	if ranks < 1 {
		panic(fmt.Sprintf("dist.AssignOwners: %d ranks", ranks))
	}
	owner := make([]int, len(params))
	first := map[*ferry.Tensor]int{}
	var order []int
	for i, p := range params {
		if j, dup := first[p]; dup {
			owner[i] = -1 - j // resolved below
			continue
		}
		first[p] = i
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(params[b].Numel(), params[a].Numel()) })
	load := make([]int64, ranks)
	for _, i := range order {
		r := 0
		for k := 1; k < ranks; k++ {
			if load[k] < load[r] {
				r = k
			}
		}
		owner[i] = r
		load[r] += int64(params[i].Numel())
	}
	for i, o := range owner {
		if o < 0 {
			owner[i] = owner[-1-o]
		}
	}
	return owner
}

// ShardOptions configure a ShardedOptimizer. The zero value asks for the
// defaults.
type ShardOptions struct {
	// BucketBytes bounds the parameter bytes broadcast in one collective
	// after a step (a parameter larger than it goes alone); 0 means
	// DefaultBucketBytes.
	BucketBytes int64
	// Owners, if set, is the owning rank of each parameter (deduplicated,
	// in order) instead of AssignOwners': GradientScatterer.Owners for
	// ZeRO-2, where the owner of a gradient must own its update.
	Owners []int
	// Device, if set, broadcasts the updated parameters on the device,
	// each from its owner in place on a side stream (NCCL:
	// ferry/dist/nccl.OnDevice), instead of through host buffers.
	Device DeviceComm
}

// ShardedOptimizer is ZeRO stage 1 on a Comm: optimizer state split
// across ranks. Each parameter is owned by one rank (AssignOwners); a
// rank's Step updates only the parameters it owns, through the inner
// optimizer's StepParam, and then every parameter is broadcast from its
// owner, so that all ranks again hold identical parameters. Since SGD's
// and AdamW's updates are per parameter, the parameters after a step are
// bit for bit those of the unsharded data-parallel step; but the inner
// optimizer allocates state (moments, momentum) only for the parameters
// StepParam reaches, so a rank holds about 1/Size of the state.
//
// The gradients must already be the ranks' mean (GradientReducer.Wait)
// when Step runs, as with an unsharded optimizer.
//
// Step is a collective: every rank calls it, once per step. State returns
// this rank's shard; GatherState (also a collective) assembles the whole
// state on one rank for a checkpoint; SetState takes a whole state (from
// any number of ranks, or one process) and keeps this rank's shard.
type ShardedOptimizer struct {
	c      Comm
	inner  optim.Stepper
	params []*ferry.Tensor // deduplicated, in order
	owner  []int           // per params
	owned  []*ferry.Tensor
	chunks []shardChunk
	buf    []float32
	stats  ShardStats
	// dc and side: the broadcasts on the device (ShardOptions.Device).
	dc   DeviceComm
	side device.Stream
}

// shardChunk is one broadcast: consecutive parameters of one owner.
type shardChunk struct {
	owner  int
	params []int
	n      int // elements
}

// ShardStats count a ShardedOptimizer's communication.
type ShardStats struct {
	Steps          int
	Broadcasts     int   // per step
	BytesBroadcast int64 // all steps, as sent by the owners
}

// NewShardedOptimizer shards inner's work over c's ranks. params are the
// parameters to update (float32, in the same order on every rank; repeats
// are dropped); inner must be an optimizer over them (or over a superset)
// whose state is allocated at a parameter's first StepParam, as every
// optimizer built on optim.Engine does, and which has taken no step yet
// (or whose state was set through this optimizer's SetState).
func NewShardedOptimizer(c Comm, inner optim.Stepper, params []*ferry.Tensor, opts ShardOptions) (*ShardedOptimizer, error) {
	capBytes := opts.BucketBytes
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 0 {
		return nil, fmt.Errorf("dist: NewShardedOptimizer: BucketBytes %d is negative", capBytes)
	}
	s := &ShardedOptimizer{c: c, inner: inner}
	seen := map[*ferry.Tensor]bool{}
	for _, p := range params {
		if seen[p] {
			continue
		}
		seen[p] = true
		if p.DType() != device.Float32 {
			return nil, fmt.Errorf("dist: NewShardedOptimizer: parameter %d (%q) is %s; parameters are broadcast as float32", len(s.params), p.Name(), p.DType())
		}
		s.params = append(s.params, p)
	}
	if opts.Owners != nil {
		if len(opts.Owners) != len(s.params) {
			return nil, fmt.Errorf("dist: NewShardedOptimizer: %d owners for %d parameters", len(opts.Owners), len(s.params))
		}
		for i, r := range opts.Owners {
			if r < 0 || r >= c.Size() {
				return nil, fmt.Errorf("dist: NewShardedOptimizer: parameter %d's owner %d is not a rank of %d", i, r, c.Size())
			}
		}
		s.owner = slices.Clone(opts.Owners)
	} else {
		s.owner = AssignOwners(s.params, c.Size())
	}
	maxChunk := 0
	for r := 0; r < c.Size(); r++ {
		var cur *shardChunk
		for i, p := range s.params {
			if s.owner[i] != r {
				continue
			}
			if r == c.Rank() {
				s.owned = append(s.owned, p)
			}
			n := p.Numel()
			if cur == nil || (cur.n > 0 && int64(cur.n+n)*4 > capBytes) {
				s.chunks = append(s.chunks, shardChunk{owner: r})
				cur = &s.chunks[len(s.chunks)-1]
			}
			cur.params = append(cur.params, i)
			cur.n += n
			maxChunk = max(maxChunk, cur.n)
		}
	}
	s.stats.Broadcasts = len(s.chunks)
	if opts.Device != nil {
		if len(s.params) == 0 {
			return nil, fmt.Errorf("dist: NewShardedOptimizer: no parameters to broadcast on the device")
		}
		if opts.Device.Size() != c.Size() || opts.Device.Rank() != c.Rank() {
			return nil, fmt.Errorf("dist: NewShardedOptimizer: the device communicator is rank %d of %d, the Comm rank %d of %d", opts.Device.Rank(), opts.Device.Size(), c.Rank(), c.Size())
		}
		side, err := s.params[0].Device().NewStream("collectives")
		if err != nil {
			return nil, fmt.Errorf("dist: NewShardedOptimizer: %w", err)
		}
		s.dc, s.side = opts.Device, side
		return s, nil
	}
	s.buf = make([]float32, maxChunk)
	return s, nil
}

// Comm is the communicator the optimizer shards over.
func (s *ShardedOptimizer) Comm() Comm { return s.c }

// Inner is the wrapped optimizer.
func (s *ShardedOptimizer) Inner() optim.Stepper { return s.inner }

// Owners is the owning rank of each parameter, in the order of Params.
func (s *ShardedOptimizer) Owners() []int { return slices.Clone(s.owner) }

// Params are the parameters, deduplicated, in order.
func (s *ShardedOptimizer) Params() []*ferry.Tensor { return slices.Clone(s.params) }

// Owned are the parameters this rank updates.
func (s *ShardedOptimizer) Owned() []*ferry.Tensor { return slices.Clone(s.owned) }

// Stats returns the communication counters.
func (s *ShardedOptimizer) Stats() ShardStats { return s.stats }

// Step updates the owned parameters from their gradients and then
// broadcasts every parameter from its owner. It is a collective; if the
// update fails on any rank, every rank returns an error and no parameter
// is broadcast (the failed rank's own error, or one naming the rank that
// failed), so the ranks stay matched.
func (s *ShardedOptimizer) Step() error {
	var stepErr error
	for _, p := range s.owned {
		if stepErr = s.inner.StepParam(p); stepErr != nil {
			break
		}
	}
	if err := agreeStep(s.c, stepErr, "dist: ShardedOptimizer: the optimizer step failed on rank %d; no parameter was broadcast"); err != nil {
		return err
	}
	if err := s.Sync(); err != nil {
		return err
	}
	s.stats.Steps++
	return nil
}

// agreeStep is every rank's verdict on a step that may have failed on
// some (stepErr: this rank's failure): one all-reduce of a flag per rank,
// so that a rank whose update fails fails the step everywhere instead of
// hanging the others in the next collective. It returns this rank's
// error, or else one made from failed (a format with the failed rank's
// number) when another rank failed. A collective.
func agreeStep(c Comm, stepErr error, failed string) error {
	if c.Size() == 1 {
		return stepErr
	}
	flag := make([]float32, c.Size())
	if stepErr != nil {
		flag[c.Rank()] = 1
	}
	if err := c.AllReduce(flag).Synchronize(); err != nil {
		if stepErr != nil {
			return stepErr
		}
		return err
	}
	if stepErr != nil {
		return stepErr
	}
	for r, v := range flag {
		if v != 0 {
			return fmt.Errorf(failed, r)
		}
	}
	return nil
}

// Sync broadcasts every parameter from its owner (Step's second half). It
// is a collective.
func (s *ShardedOptimizer) Sync() error {
	if s.c.Size() == 1 {
		return nil
	}
	if s.dc != nil {
		return s.syncDevice()
	}
	return ferry.Catch(func() error {
		me := s.c.Rank()
		for _, ch := range s.chunks {
			buf := s.buf[:ch.n]
			if ch.owner == me {
				off := 0
				for _, i := range ch.params {
					p := s.params[i]
					if err := p.Device().Kernels().Download(f32bytes(buf[off:off+p.Numel()]), p.View()); err != nil {
						return err
					}
					off += p.Numel()
				}
			}
			if err := s.c.Broadcast(buf, ch.owner).Synchronize(); err != nil {
				return err
			}
			if ch.owner == me {
				s.stats.BytesBroadcast += int64(ch.n) * 4
				continue
			}
			off := 0
			for _, i := range ch.params {
				p := s.params[i]
				if err := upload(p, buf[off:off+p.Numel()], "dist.sharded_step"); err != nil {
					return fmt.Errorf("dist: ShardedOptimizer: writing parameter %d (%q) from rank %d: %w", i, p.Name(), ch.owner, err)
				}
				off += p.Numel()
			}
		}
		return nil
	})
}

// syncDevice is Sync on the device: each parameter broadcast in place
// from its owner through the DeviceComm on the side stream, which waits
// for the update; the compute stream then waits for the broadcasts.
func (s *ShardedOptimizer) syncDevice() error {
	return ferry.Catch(func() error {
		me := s.c.Rank()
		for _, ch := range s.chunks {
			for _, i := range ch.params {
				p := s.params[i]
				if p.Numel() == 0 {
					continue
				}
				dev := p.Device()
				p.View() // resident
				s.side.Wait(dev.Compute().Record())
				if err := s.dc.Broadcast(devSpan(p, 0, p.Numel()), p.Numel(), ch.owner, s.side); err != nil {
					return fmt.Errorf("dist: ShardedOptimizer: broadcasting parameter %d (%q) from rank %d: %w", i, p.Name(), ch.owner, err)
				}
				dev.Compute().Wait(s.side.Record())
				if ch.owner != me {
					ferry.BumpVersion(p, "dist.sharded_step")
				}
			}
			if ch.owner == me {
				s.stats.BytesBroadcast += int64(ch.n) * 4
			}
		}
		return nil
	})
}

// ZeroGrad drops every parameter's gradient.
func (s *ShardedOptimizer) ZeroGrad() {
	for _, p := range s.params {
		p.SetGrad(nil)
	}
}

// LR is the inner optimizer's learning rate.
func (s *ShardedOptimizer) LR() float64 { return s.inner.LR() }

// SetLR sets the inner optimizer's learning rate (every rank must set the
// same).
func (s *ShardedOptimizer) SetLR(lr float64) { s.inner.SetLR(lr) }

// Release frees the inner optimizer's state.
func (s *ShardedOptimizer) Release() { s.inner.Release() }

// Name is the inner optimizer's.
func (s *ShardedOptimizer) Name() string { return s.inner.Name() }

// Hyper is the inner optimizer's.
func (s *ShardedOptimizer) Hyper() map[string]any { return s.inner.Hyper() }

// StateBytes is the bytes of optimizer state this rank holds.
func (s *ShardedOptimizer) StateBytes() int64 {
	st, ok := s.inner.(optim.Stateful)
	if !ok {
		return 0
	}
	var n int64
	for _, t := range st.State().Tensors {
		n += t.StorageBytes()
	}
	return n
}

// StateOnHost is the inner optimizer's (optim.HostPlaced): a checkpoint
// loader then reads the state into host memory, not the device's.
func (s *ShardedOptimizer) StateOnHost() bool {
	h, ok := s.inner.(optim.HostPlaced)
	return ok && h.StateOnHost()
}

// State returns this rank's shard of the state: the inner optimizer's
// entries, which exist only for parameters this rank owns. (The inner
// optimizer must be optim.Stateful; otherwise the state is empty.)
func (s *ShardedOptimizer) State() optim.State {
	if st, ok := s.inner.(optim.Stateful); ok {
		return st.State()
	}
	return optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
}

// SetState takes a whole optimizer state (as GatherState or an unsharded
// optimizer's State gives, written by any number of ranks) and hands the
// entries of the parameters this rank owns to the inner optimizer, which
// must be optim.Stateful. Entries of other parameters are checked to name
// a parameter and then dropped. Not a collective.
func (s *ShardedOptimizer) SetState(st optim.State) error {
	inner, ok := s.inner.(optim.Stateful)
	if !ok {
		return fmt.Errorf("dist: ShardedOptimizer: the inner optimizer %T cannot set its state (optim.Stateful)", s.inner)
	}
	mine := map[string]bool{}
	all := map[string]bool{}
	for i, p := range s.params {
		all[p.Name()] = true
		if s.owner[i] == s.c.Rank() {
			mine[p.Name()] = true
		}
	}
	part := optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	var problems []string
	for k, t := range st.Tensors {
		pn := paramOfKey(k)
		switch {
		case mine[pn]:
			part.Tensors[k] = t
		case !all[pn]:
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
		}
	}
	for k, v := range st.Scalars {
		pn := paramOfKey(k)
		switch {
		case mine[pn]:
			part.Scalars[k] = v
		case !all[pn]:
			problems = append(problems, fmt.Sprintf("unexpected state scalar %q", k))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("dist: ShardedOptimizer: state does not match the parameters:\n  %s", strings.Join(problems, "\n  "))
	}
	return inner.SetState(part)
}

// CheckState checks a whole state (as SetState takes it) against the
// inner optimizer without changing anything, where the inner optimizer
// can (optim.Engine's CheckState); otherwise it accepts st, and SetState
// checks it.
func (s *ShardedOptimizer) CheckState(st optim.State) error {
	if c, ok := s.inner.(interface{ CheckState(optim.State) error }); ok {
		return c.CheckState(st)
	}
	return nil
}

func paramOfKey(k string) string {
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		return k[:i]
	}
	return k
}

// GatherState assembles the whole optimizer state on root, for a
// checkpoint that any number of ranks (or one process) can load: each
// owner broadcasts the names, scalars and tensor values of its shard in
// turn. It is a collective. On root it returns the whole state and a
// function that frees the tensors it made for other ranks' entries (the
// root's own entries are the inner optimizer's, as State's are); on the
// other ranks it returns an empty state. The gathered tensors are made on
// each parameter's device.
func (s *ShardedOptimizer) GatherState(root int) (st optim.State, release func(), err error) {
	st = optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	var made []*ferry.Tensor
	release = func() {
		for _, t := range made {
			t.Release()
		}
		made = nil
	}
	if err := CheckRoot(root, s.c.Size()); err != nil {
		return st, release, err
	}
	byName := map[string]*ferry.Tensor{}
	for _, p := range s.params {
		byName[p.Name()] = p
	}
	me := s.c.Rank()
	err = ferry.Catch(func() error {
		for r := 0; r < s.c.Size(); r++ {
			var local optim.State
			var manifest []byte
			if r == me {
				local = s.State()
				manifest = encodeManifest(local)
			}
			manifest, err := s.broadcastBytes(manifest, r)
			if err != nil {
				return err
			}
			keys, scalars, err := decodeManifest(manifest)
			if err != nil {
				return fmt.Errorf("dist: GatherState: rank %d's manifest: %w", r, err)
			}
			if me == root {
				for k, v := range scalars {
					st.Scalars[k] = v
				}
			}
			for _, e := range keys {
				k := e.key
				if byName[paramOfKey(k)] == nil {
					return fmt.Errorf("dist: GatherState: rank %d holds state %q for a parameter this rank lacks", r, k)
				}
				var raw []byte
				if r == me {
					src := local.Tensors[k]
					if src == nil || src.DType() != e.dtype || !slices.Equal(src.Shape(), e.shape) {
						return fmt.Errorf("dist: GatherState: state %q is not the tensor its manifest names", k)
					}
					raw = src.RawBytes()
				}
				if raw, err = s.broadcastRaw(raw, int64(device.Numel(e.shape))*int64(e.dtype.Size()), r); err != nil {
					return err
				}
				switch {
				case r == me && me == root:
					st.Tensors[k] = local.Tensors[k]
				case me == root:
					t := ferry.ZerosOf(byName[paramOfKey(k)].Device(), e.dtype, device.OptimizerState, e.shape...)
					made = append(made, t)
					st.Tensors[k] = t
					if t.Numel() > 0 {
						t.SetRawBytes(raw)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		release()
		st = optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	}
	return st, release, err
}

// broadcastRaw sends root's n bytes b to every rank, in pieces of s.buf
// (four bytes a float32 word, bits unchanged: a broadcast copies them),
// and returns them on every rank.
func (s *ShardedOptimizer) broadcastRaw(b []byte, n int64, root int) ([]byte, error) {
	words := make([]float32, (n+3)/4)
	if s.c.Rank() == root {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 4*len(words)), b)
	}
	for off := 0; off < len(words); off += max(1, len(s.buf)) {
		part := words[off:min(len(words), off+max(1, len(s.buf)))]
		if err := s.c.Broadcast(part, root).Synchronize(); err != nil {
			return nil, err
		}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 4*len(words))[:n], nil
}

// broadcastBytes sends root's b to every rank (a length, then the bytes
// one per float32, which holds them exactly).
func (s *ShardedOptimizer) broadcastBytes(b []byte, root int) ([]byte, error) {
	n := []float32{float32(len(b))}
	if len(b) > 1<<24 {
		n[0] = -1
	}
	if err := s.c.Broadcast(n, root).Synchronize(); err != nil {
		return nil, err
	}
	if n[0] < 0 {
		return nil, fmt.Errorf("dist: GatherState: rank %d's state names take more than 16 MiB", root)
	}
	f := make([]float32, int(n[0]))
	if s.c.Rank() == root {
		for i, c := range b {
			f[i] = float32(c)
		}
	}
	if err := s.c.Broadcast(f, root).Synchronize(); err != nil {
		return nil, err
	}
	out := make([]byte, len(f))
	for i, v := range f {
		out[i] = byte(v)
	}
	return out, nil
}

// manifestEntry is one state tensor of a shard's manifest.
type manifestEntry struct {
	key   string
	dtype device.DType
	shape []int
}

// encodeManifest lists a shard's state: "T key dtype d0,d1,…" per tensor
// and "S key value" per scalar, one a line, sorted.
func encodeManifest(st optim.State) []byte {
	var lines []string
	for k, t := range st.Tensors {
		dims := make([]string, t.Rank())
		for i, d := range t.Shape() {
			dims[i] = strconv.Itoa(d)
		}
		lines = append(lines, fmt.Sprintf("T %s %d %s", k, t.DType(), strings.Join(dims, ",")))
	}
	for k, v := range st.Scalars {
		lines = append(lines, "S "+k+" "+strconv.FormatFloat(v, 'g', -1, 64))
	}
	slices.Sort(lines)
	return []byte(strings.Join(lines, "\n"))
}

func decodeManifest(b []byte) (keys []manifestEntry, scalars map[string]float64, err error) {
	scalars = map[string]float64{}
	if len(b) == 0 {
		return nil, scalars, nil
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		l := string(line)
		switch {
		case strings.HasPrefix(l, "T "):
			f := strings.Split(l, " ")
			if len(f) != 4 {
				return nil, nil, fmt.Errorf("bad line %q", l)
			}
			dt, err := strconv.Atoi(f[2])
			if err != nil || dt < 0 || dt > 255 {
				return nil, nil, fmt.Errorf("bad dtype in %q", l)
			}
			e := manifestEntry{key: f[1], dtype: device.DType(dt), shape: []int{}}
			if f[3] != "" {
				for _, d := range strings.Split(f[3], ",") {
					v, err := strconv.Atoi(d)
					if err != nil || v < 0 {
						return nil, nil, fmt.Errorf("bad shape in %q", l)
					}
					e.shape = append(e.shape, v)
				}
			}
			if _, _, err := device.ShapeBytes(e.shape, e.dtype.Size()); err != nil {
				return nil, nil, fmt.Errorf("bad shape in %q: %w", l, err)
			}
			keys = append(keys, e)
		case strings.HasPrefix(l, "S "):
			i := strings.LastIndexByte(l, ' ')
			v, err := strconv.ParseFloat(l[i+1:], 64)
			if err != nil || i < 2 || math.IsNaN(v) {
				return nil, nil, fmt.Errorf("bad scalar line %q", l)
			}
			scalars[l[2:i]] = v
		default:
			return nil, nil, fmt.Errorf("bad line %q", l)
		}
	}
	return keys, scalars, nil
}

var _ optim.Stateful = (*ShardedOptimizer)(nil)
