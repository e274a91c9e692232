// Package gemm is a pure-Go (plus Go assembly) single-precision matrix
// multiply, which the CPU device runs wherever its measured per-shape
// table or its fixed rule prefers it to OpenBLAS and wherever no native
// BLAS loads (package device/cpu), and the CPU's only bfloat16 matrix
// multiply (GemmBF16, bf16.go: bfloat16 A and B, float32 sums, C in
// float32 or bfloat16).
//
// Sgemm follows the Goto/BLIS design. op(B) is packed into KC×NC panels
// split into NR-column micro-panels and op(A) into MC×KC blocks split into
// MR-row micro-panels; transposes are resolved while packing, so the
// register-tiled micro-kernel always sees one contiguous layout. Edges are
// zero-padded in the packed panels and written back through a small scratch
// tile.
//
// Micro-kernels (selected at start-up, see Kernel):
//
//   - "avx512" (amd64 with AVX-512F): Go assembly, 6×64 tiles (24 zmm
//     accumulators, 4 vector loads and 6 broadcasts per 24 FMAs), or 14×32
//     tiles (28 accumulators) when n is small enough that 64-wide tiles
//     would waste work. Packing uses AVX-512 16×16 register transposes.
//   - "avx2" (amd64 with AVX2 and FMA): Go assembly, 6×16 tiles (12 ymm
//     accumulators); packing in Go.
//   - "generic": portable Go, 4×4 tiles (about 4-5 GFLOP/s per core on
//     amd64; meant for other architectures, where the 16 accumulators fit
//     in registers).
//
// The environment variable FERRY_GEMM_KERNEL=generic|avx2|avx512 forces a
// kernel if the CPU supports it (read once, at package initialisation);
// FERRY_CPU (package isa) caps the kernels offered, with every other SIMD
// path of ferry.
//
// Work is split into a fixed grid of blocks of C aligned to the micro-tile,
// which the calling goroutine and up to SetWorkers-1 pool goroutines claim
// dynamically; each block packs its own panels. Every element of C is
// accumulated in the same order whatever the grid and whoever computes it
// (same KC blocking, one FMA chain per element), so results are bitwise
// reproducible run to run and independent of the worker count. The avx512
// and avx2 kernels even agree bit for bit with each other (all use fused
// multiply-adds in the same order); the generic kernel rounds differently.
package gemm

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// microKernel computes an mr×nr tile; see gen_kernels.go for the contract.
type microKernel func(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// packFunc is a packing primitive; see pack.go.
type packFunc func(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int)

// kernelInfo describes a micro-kernel and its cache blocking.
type kernelInfo struct {
	name       string
	fn         microKernel
	mr, nr     int
	mc, kc, nc int     // maximum block sizes; mc is a multiple of mr, nc of nr
	cost       float64 // relative time per padded multiply-add, for variant choice
	// pairs marks a bfloat16 kernel (VDPBF16PS): its packed panels hold
	// pairs of k-steps in 32-bit slots and its kc counts pairs
	// (pack_bf16.go); kc above counts k-steps and is even.
	pairs bool
	// pairCopy and pairGather pack bfloat16 pairs for a pairs kernel
	// (pack_bf16.go).
	pairCopy, pairGather func(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int)

	packCopy, packGather packFunc
}

// family is a set of micro-kernels sharing an instruction set; Sgemm picks
// the variant whose tile shape fits the product best.
type family struct {
	name     string
	variants []*kernelInfo
}

// pick returns the variant that minimises padded work for an m×n product.
func (f *family) pick(m, n int) *kernelInfo {
	best := f.variants[0]
	bestCost := 0.0
	for i, k := range f.variants {
		c := float64(roundUp(m, k.mr)) * float64(roundUp(n, k.nr)) * k.cost
		if i == 0 || c < bestCost {
			best, bestCost = k, c
		}
	}
	return best
}

var (
	active   *family
	families = map[string]*family{}
	workers  atomic.Int32 // 0: follow runtime.GOMAXPROCS
)

func init() {
	registerGeneric()
	registerArch() // adds the kernels this CPU supports
	active = families[Kernels()[0]]
	if want := strings.ToLower(strings.TrimSpace(os.Getenv("FERRY_GEMM_KERNEL"))); want != "" {
		if f, ok := families[want]; ok {
			active = f
		} else {
			fmt.Fprintf(os.Stderr, "gemm: FERRY_GEMM_KERNEL=%s not supported on this CPU (have %v); using %s\n",
				want, Kernels(), active.name)
		}
	}
}

func register(fam string, k *kernelInfo) {
	if k.packCopy == nil {
		k.packCopy, k.packGather = packCopyGo, packGatherGo
	}
	if k.cost == 0 {
		k.cost = 1
	}
	f := families[fam]
	if f == nil {
		f = &family{name: fam}
		families[fam] = f
	}
	f.variants = append(f.variants, k)
}

// Kernel reports which micro-kernel is in use: "avx512", "avx2", or "generic".
func Kernel() string { return active.name }

// Kernels lists the micro-kernels supported on this CPU, best first.
func Kernels() []string {
	var r []string
	for _, n := range []string{"avx512", "avx2", "generic"} {
		if _, ok := families[n]; ok {
			r = append(r, n)
		}
	}
	return r
}

// SetWorkers sets how many goroutines Sgemm may use and returns the
// previous value. The default, restored by n < 1, is runtime.GOMAXPROCS(0)
// read at each call.
func SetWorkers(n int) int {
	prev := int(workers.Swap(int32(min(max(n, 0), 1<<16))))
	if prev == 0 {
		prev = runtime.GOMAXPROCS(0)
	}
	return prev
}

// numWorkers returns the current worker limit.
func numWorkers() int {
	if n := int(workers.Load()); n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices, with
// the conventions of blas.Sgemm / cblas_sgemm(CblasRowMajor, ...): op(A) is
// m×k (A is stored k×m when transA), op(B) is k×n (B is stored n×k when
// transB), C is m×n, and lda, ldb, ldc are row strides in elements.
//
// When beta == 0, C is not read (it may hold NaNs); when alpha == 0 or
// k == 0, A and B are not read and C is only scaled by beta. Sgemm panics if
// a dimension is negative, a leading dimension too small or a slice too
// short. It is safe for concurrent use.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(active.pick(m, n), numWorkers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmSerial is Sgemm on the calling goroutine alone, for callers that run
// independent products in parallel themselves (the heads of an attention).
// It gives the same bits as Sgemm.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(active.pick(m, n), 1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// checkArgs validates dimensions and the lengths of A, B and C.
func checkArgs(transA, transB bool, m, n, k int, lenA, lda, lenB, ldb, lenC, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	check := func(name string, length, rows, cols, ld int) {
		if ld < max(1, cols) {
			panic(fmt.Sprintf("gemm: ld%s = %d < %d", name, ld, max(1, cols)))
		}
		if rows > 0 && cols > 0 && length < (rows-1)*ld+cols {
			panic(fmt.Sprintf("gemm: len(%s) = %d < %d needed for a %d×%d matrix with ld%s %d",
				name, length, (rows-1)*ld+cols, rows, cols, name, ld))
		}
	}
	check("c", lenC, m, n, ldc)
	check("a", lenA, ar, ac, lda)
	check("b", lenB, br, bc, ldb)
}

// scaleC sets C = beta*C (C = 0 without reading it when beta == 0).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// args are one product's operands and blocking.
type args struct {
	k              *kernelInfo
	transA, transB bool
	m, n, kk       int
	alpha, beta    float32
	a, b, c        []float32
	a16, b16       []uint16 // bfloat16 A and B (GemmBF16), a and b unused
	c16            []uint16 // bfloat16 C (GemmBF16To16), c unused
	lda, ldb, ldc  int
	kcBlk          int // balanced KC for this call
}

// problem is one Sgemm call.
type problem struct {
	args

	// Parallel calls only: a pm×pn grid of blocks of C, claimed through
	// next; done counts finished blocks.
	mt, nt, pm, pn int
	next           atomic.Int32
	done           doneGroup
}

// Parallel tuning (variables so that tests can force tiny grids).
var (
	// Products with fewer multiply-adds than this stay on the calling
	// goroutine (≈30 µs of single-core work with the AVX-512 kernel).
	parallelThreshold = 128.0 * 128 * 128
	// Blocks of the parallel grid are kept above this many multiply-adds.
	minBlockWork = 96.0 * 96 * 96
)

// At most this many grid blocks per worker, for load balancing.
const blocksPerWorker = 3

func sgemm(kern *kernelInfo, nw int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	solve(args{
		k: kern, transA: transA, transB: transB, m: m, n: n, kk: k,
		alpha: alpha, beta: beta, a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc,
	}, nw)
}

// solve computes the product that a describes (its arguments checked) on
// up to nw goroutines.
func solve(a args, nw int) {
	kern := a.k
	m, n, k := a.m, a.n, a.kk
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || a.alpha == 0 {
		if a.c16 != nil {
			scaleC16(m, n, a.beta, a.c16, a.ldc)
			return
		}
		scaleC(m, n, a.beta, a.c, a.ldc)
		return
	}
	if a.beta == 0 {
		a.beta = 0 // normalise -0 so the kernels can test the bit pattern
	}
	a.kcBlk = balancedKC(kern, k)

	work := float64(m) * float64(n) * float64(k)
	mt := (m + kern.mr - 1) / kern.mr // row tiles
	nt := (n + kern.nr - 1) / kern.nr // column tiles
	if nw <= 1 || work < parallelThreshold || mt*nt == 1 {
		p := problem{args: a}
		p.run(0, m, 0, n)
		return
	}
	// The problem is shared with pool goroutines that may look at it after
	// this call returns (a late helper finding no work left), so it is
	// heap-allocated rather than pooled.
	p := &problem{args: a, mt: mt, nt: nt}
	blocks := min(nw*blocksPerWorker, max(nw, int(work/minBlockWork)))
	p.pm, p.pn = partition(nw, blocks, mt, nt, kern)
	nb := p.pm * p.pn
	p.done.add(nb)
	submit(p, min(nw, nb)-1)
	p.work()
	p.done.wait()
}

// balancedKC is the depth of the k blocks of a product of depth k: equal
// blocks no deeper than kern.kc (even for a pairs kernel, so that only the
// last block may end on half a pair).
func balancedKC(kern *kernelInfo, k int) int {
	nkb := (k + kern.kc - 1) / kern.kc
	kc := (k + nkb - 1) / nkb
	if kern.pairs {
		kc = roundUp(kc, 2)
	}
	return kc
}

// work claims and computes blocks of the grid until none is left.
func (p *problem) work() {
	nb := p.pm * p.pn
	kern := p.k
	for {
		b := int(p.next.Add(1)) - 1
		if b >= nb {
			return
		}
		i, j := b/p.pn, b%p.pn
		m0, m1 := min(p.m, i*p.mt/p.pm*kern.mr), min(p.m, (i+1)*p.mt/p.pm*kern.mr)
		n0, n1 := min(p.n, j*p.nt/p.pn*kern.nr), min(p.n, (j+1)*p.nt/p.pn*kern.nr)
		p.run(m0, m1, n0, n1)
		p.done.finish()
	}
}

// partition chooses a pm×pn grid of between nb/2 and nb blocks of C (in
// micro-tiles: mt rows, nt columns) for nw workers, minimising the
// estimated time: rounds of blocks per worker times the cost of the largest
// block (its multiply-adds plus packing its panels of A and B). nb is
// normally a few blocks per worker, so that a worker slowed down by other
// load on its core leaves blocks for the others.
func partition(nw, nb, mt, nt int, k *kernelInfo) (pm, pn int) {
	best := -1.0
	pm, pn = 1, 1
	for w := nb; w >= 1 && w > nb/2; w-- {
		rounds := float64((w + nw - 1) / nw)
		for i := 1; i <= w; i++ {
			if w%i != 0 || i > mt || w/i > nt {
				continue
			}
			j := w / i
			rm := float64((mt+i-1)/i) * float64(k.mr)
			rn := float64((nt+j-1)/j) * float64(k.nr)
			// Per unit of k: rm*rn multiply-adds, 16-32 per cycle, versus
			// roughly one packed element per cycle.
			cost := rounds * (rm*rn + 24*(rm+rn))
			if best < 0 || cost < best*0.999 {
				best, pm, pn = cost, i, j
			}
		}
	}
	return pm, pn
}

// buffers are a worker's packing buffers, 64-byte aligned.
type buffers struct {
	rawA, rawB []float32
	rawC       []float32        // a block of a bfloat16 C, in float32 (runC16)
	tile       [16 * 64]float32 // scratch for edge tiles (mr*nr <= 1024)
}

// bufFree holds idle packing buffers. Unlike a sync.Pool it is not emptied
// by the garbage collector, so a program that allocates heavily between
// products does not keep re-allocating (and re-zeroing) megabytes of
// packing space; it holds as many buffers as there were concurrent blocks
// at peak (up to its capacity).
var bufFree = make(chan *buffers, 64)

func getBuffers() *buffers {
	select {
	case b := <-bufFree:
		return b
	default:
		return new(buffers)
	}
}

func putBuffers(b *buffers) {
	select {
	case bufFree <- b:
	default:
	}
}

// aligned returns a 64-byte aligned slice of n elements backed by *raw.
func aligned(raw *[]float32, n int) []float32 {
	if cap(*raw) < n+16 {
		*raw = make([]float32, n+16)
	}
	r := (*raw)[:cap(*raw)]
	off := (64 - int(uintptr(unsafe.Pointer(&r[0]))&63)) & 63 / 4
	return r[off : off+n]
}

// run computes the block C[m0:m1, n0:n1].
func (p *problem) run(m0, m1, n0, n1 int) {
	if m0 >= m1 || n0 >= n1 {
		return
	}
	if p.c16 != nil {
		p.runC16(m0, m1, n0, n1)
		return
	}
	kern := p.k
	mr, nr := kern.mr, kern.nr
	buf := getBuffers()
	defer putBuffers(buf)

	// Balanced MC and NC for this block.
	mB, nB := m1-m0, n1-n0
	nmb := (mB + kern.mc - 1) / kern.mc
	mcBlk := roundUp((mB+nmb-1)/nmb, mr)
	nnb := (nB + kern.nc - 1) / kern.nc
	ncBlk := roundUp((nB+nnb-1)/nnb, nr)
	kcBlk := p.kcBlk
	packA := aligned(&buf.rawA, mcBlk*kern.slots(kcBlk))
	packB := aligned(&buf.rawB, kern.slots(kcBlk)*ncBlk)

	for jc := n0; jc < n1; jc += ncBlk {
		nc := min(ncBlk, n1-jc)
		for pc := 0; pc < p.kk; pc += kcBlk {
			kc := min(kcBlk, p.kk-pc)
			beta := p.beta
			if pc > 0 {
				beta = 1
			}
			p.packB(packB, pc, jc, kc, nc)
			for ic := m0; ic < m1; ic += mcBlk {
				mc := min(mcBlk, m1-ic)
				p.packA(packA, ic, pc, mc, kc)
				p.macro(buf, packA, packB, ic, jc, mc, nc, kc, beta)
			}
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// slots is the depth of a packed panel of kc k-steps: kc, or the number
// of pairs for a pairs kernel.
func (k *kernelInfo) slots(kc int) int {
	if k.pairs {
		return (kc + 1) / 2
	}
	return kc
}

// macro runs the micro-kernel over an mc×nc block of C at (ic, jc).
func (p *problem) macro(buf *buffers, packA, packB []float32, ic, jc, mc, nc, kc int, beta float32) {
	kern := p.k
	mr, nr := kern.mr, kern.nr
	alpha := p.alpha
	ldc := p.ldc
	kc = kern.slots(kc)
	for jr := 0; jr < nc; jr += nr {
		nrr := min(nr, nc-jr)
		bp := &packB[jr*kc]
		for ir := 0; ir < mc; ir += mr {
			mrr := min(mr, mc-ir)
			ap := &packA[ir*kc]
			coff := (ic+ir)*ldc + jc + jr
			if mrr == mr && nrr == nr {
				_ = p.c[coff+(mr-1)*ldc+nr-1] // the kernel writes the whole tile
				kern.fn(kc, ap, bp, &p.c[coff], ldc, alpha, beta)
				continue
			}
			// Edge tile: compute the full tile into scratch, then merge with
			// the same rounding as the kernels' store.
			t := buf.tile[:mr*nr]
			kern.fn(kc, ap, bp, &t[0], nr, 1, 0)
			for i := 0; i < mrr; i++ {
				crow := p.c[coff+i*ldc : coff+i*ldc+nrr]
				trow := t[i*nr : i*nr+nrr]
				if beta == 0 {
					for j := range crow {
						crow[j] = alpha * trow[j]
					}
				} else {
					for j := range crow {
						crow[j] = float32(alpha*trow[j]) + float32(beta*crow[j])
					}
				}
			}
		}
	}
}
