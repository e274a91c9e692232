package fake

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// blasHandle is a fake cuBLAS handle: its stream, math mode and workspace.
type blasHandle struct {
	stream cu.Stream
	mode   cu.MathMode
	ws     cu.DevicePtr
	wsSize int64
}

func (c *Context) blasEnter(call string) error {
	if c.drv.opts.NoBLAS {
		return fmt.Errorf("%s: %w: %s", call, cu.ErrNoBLAS, c.drv.Info().BLASError)
	}
	return c.enter(call)
}

func (c *Context) handle(call string, h cu.BLASHandle) (*blasHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.blas[h]
	if b == nil {
		return nil, cu.BLASError(call, cu.BLASNotInitialized)
	}
	return b, nil
}

func (c *Context) BLASCreate() (cu.BLASHandle, error) {
	if err := c.blasEnter("cublasCreate_v2"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := cu.BLASHandle(c.newID())
	c.blas[h] = &blasHandle{}
	return h, nil
}

func (c *Context) BLASDestroy(h cu.BLASHandle) error {
	const call = "cublasDestroy_v2"
	if err := c.blasEnter(call); err != nil {
		return err
	}
	if _, err := c.handle(call, h); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.blas, h)
	c.mu.Unlock()
	return nil
}

// BLASSetStream sets the handle's stream and, as cuBLAS does, resets its
// workspace to cuBLAS's own.
func (c *Context) BLASSetStream(h cu.BLASHandle, s cu.Stream) error {
	const call = "cublasSetStream_v2"
	if err := c.blasEnter(call); err != nil {
		return err
	}
	b, err := c.handle(call, h)
	if err != nil {
		return err
	}
	if _, err := c.stream(call, s); err != nil {
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	c.mu.Lock()
	b.stream, b.ws, b.wsSize = s, 0, 0
	c.mu.Unlock()
	return nil
}

func (c *Context) BLASSetWorkspace(h cu.BLASHandle, p cu.DevicePtr, n int64) error {
	const call = "cublasSetWorkspace_v2"
	if err := c.blasEnter(call); err != nil {
		return err
	}
	b, err := c.handle(call, h)
	if err != nil {
		return err
	}
	if _, err := c.deviceBytes(p, n); err != nil || p%256 != 0 {
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	c.mu.Lock()
	b.ws, b.wsSize = p, n
	c.mu.Unlock()
	return nil
}

func (c *Context) BLASSetMathMode(h cu.BLASHandle, m cu.MathMode) error {
	const call = "cublasSetMathMode"
	if err := c.blasEnter(call); err != nil {
		return err
	}
	b, err := c.handle(call, h)
	if err != nil {
		return err
	}
	if m != cu.DefaultMath && m != cu.TF32Math && m != 1 && m != 2 {
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	c.mu.Lock()
	b.mode = m
	c.mu.Unlock()
	return nil
}

// BLASState describes a cuBLAS handle, for tests.
type BLASState struct {
	Mode      cu.MathMode
	Workspace int64 // bytes handed over with cublasSetWorkspace (0: cuBLAS's own)
}

// BLASHandles describes the context's cuBLAS handles.
func (c *Context) BLASHandles() []BLASState {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []BLASState
	for _, b := range c.blas {
		out = append(out, BLASState{Mode: b.mode, Workspace: b.wsSize})
	}
	return out
}

// SgemmStridedBatched checks its arguments as cuBLAS does, then queues a
// column-major product on the handle's stream. In TF32 mode the inputs are
// rounded to TF32 (10 mantissa bits), as tensor cores would read them.
func (c *Context) SgemmStridedBatched(h cu.BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a cu.DevicePtr, lda int, strideA int64, b cu.DevicePtr, ldb int, strideB int64,
	beta float32, cp cu.DevicePtr, ldc int, strideC int64, batch int) error {
	return c.gemm("cublasSgemmStridedBatched", h, transA, transB, m, n, k, alpha, a, cu.R32F, lda, strideA, b, cu.R32F, ldb, strideB,
		beta, cp, cu.R32F, ldc, strideC, batch)
}

// GemmStridedBatchedEx checks its arguments as cuBLAS does and queues a
// column-major product on the handle's stream, for the element types
// ferry uses with CUBLAS_COMPUTE_32F: bfloat16 A and B with a bfloat16 or
// float32 C, or all float32 (rounded to TF32 in TF32 mode). Products and
// sums are float32 (a product of two bfloat16 values is exact in
// float32); a bfloat16 C is read widened and written rounded to nearest
// even, as device.ToBFloat16 rounds. Other type combinations answer
// CUBLAS_STATUS_NOT_SUPPORTED.
func (c *Context) GemmStridedBatchedEx(h cu.BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a cu.DevicePtr, typeA cu.DataType, lda int, strideA int64, b cu.DevicePtr, typeB cu.DataType, ldb int, strideB int64,
	beta float32, cp cu.DevicePtr, typeC cu.DataType, ldc int, strideC int64, batch int) error {
	return c.gemm("cublasGemmStridedBatchedEx", h, transA, transB, m, n, k, alpha, a, typeA, lda, strideA, b, typeB, ldb, strideB,
		beta, cp, typeC, ldc, strideC, batch)
}

// gemm checks a cuBLAS product's arguments and queues it: the CPU
// device's Gemm (Note [one source per kernel]), which is row-major. A
// column-major matrix read row-major is its transpose, so column-major
// C = op(A)·op(B) is row-major Cᵀ = op(B)ᵀ·op(A)ᵀ: A and B (and m and n)
// swap, each keeping its transpose flag and leading dimension, as the
// CUDA device swaps them on the way in.
func (c *Context) gemm(call string, h cu.BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a cu.DevicePtr, typeA cu.DataType, lda int, strideA int64, b cu.DevicePtr, typeB cu.DataType, ldb int, strideB int64,
	beta float32, cp cu.DevicePtr, typeC cu.DataType, ldc int, strideC int64, batch int) error {
	if err := c.blasEnter(call); err != nil {
		return err
	}
	bh, err := c.handle(call, h)
	if err != nil {
		return err
	}
	bf16In := typeA == cu.R16BF && typeB == cu.R16BF && (typeC == cu.R16BF || typeC == cu.R32F)
	f32 := typeA == cu.R32F && typeB == cu.R32F && typeC == cu.R32F
	if !bf16In && !f32 {
		return cu.BLASError(call, cu.BLASNotSupported)
	}
	rowsA, rowsB := m, k
	if transA {
		rowsA = k
	}
	if transB {
		rowsB = n
	}
	if m < 0 || n < 0 || k < 0 || batch < 0 || lda < max(1, rowsA) || ldb < max(1, rowsB) || ldc < max(1, m) ||
		strideA < 0 || strideB < 0 || strideC < 0 {
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	c.mu.Lock()
	s, mode := bh.stream, bh.mode
	c.mu.Unlock()
	st, err := c.stream(call, s)
	if err != nil {
		return cu.BLASError(call, cu.BLASInvalidValue) // the fake wants the device's own stream
	}
	dtype := map[cu.DataType]device.DType{cu.R32F: device.Float32, cu.R16BF: device.BFloat16}
	p := device.GemmParams{TransA: transB, TransB: transA, M: n, N: m, K: k, Alpha: alpha, Beta: beta,
		LDA: ldb, LDB: lda, LDC: ldc, StrideA: int(strideB), StrideB: int(strideA), StrideC: int(strideC), Batch: batch,
		TypeA: dtype[typeB], TypeB: dtype[typeA], TypeC: dtype[typeC]}
	delay := c.drv.opts.KernelDelay
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		return c.run(call, func(kl *launch) {
			if m == 0 || n == 0 || batch == 0 {
				return
			}
			na, nb := kl.gemmOperands(&p, uint64(b), uint64(a), uint64(cp))
			if f32 && mode == cu.TF32Math {
				p.A, p.B = tf32Copy(p.A, na), tf32Copy(p.B, nb)
			}
			kl.must(host.Gemm(p))
		}, &launch{mem: c.deviceTail, name: call})
	})
	return nil
}

// tf32Copy is a copy of a float32 operand's first n elements rounded to
// TF32.
func tf32Copy(b *device.Block, n int) *device.Block {
	src := b.Segment().(hostBytes)
	out := make(hostBytes, 4*n)
	for i := 0; i < len(out); i += 4 {
		binary.NativeEndian.PutUint32(out[i:], math.Float32bits(tf32(math.Float32frombits(binary.NativeEndian.Uint32(src[i:])))))
	}
	return device.ForeignBlock(out, 0, int64(len(out)))
}

// tf32 rounds x to the nearest TF32 value (10 mantissa bits).
func tf32(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 { // Inf, NaN
		return x
	}
	return math.Float32frombits((b + 0x1000) &^ 0x1fff)
}
