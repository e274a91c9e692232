package fake

import (
	"fmt"
	"math"
	"time"
	"unsafe"

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
	const call = "cublasSgemmStridedBatched"
	if err := c.blasEnter(call); err != nil {
		return err
	}
	bh, err := c.handle(call, h)
	if err != nil {
		return err
	}
	rowsA, rowsB := m, k
	if transA {
		rowsA = k
	}
	if transB {
		rowsB = n
	}
	if m < 0 || n < 0 || k < 0 || batch < 0 || lda < max(1, rowsA) || ldb < max(1, rowsB) || ldc < max(1, m) {
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	c.mu.Lock()
	s, mode := bh.stream, bh.mode
	c.mu.Unlock()
	st, err := c.stream(call, s)
	if err != nil {
		return cu.BLASError(call, cu.BLASInvalidValue) // the fake wants the device's own stream
	}
	delay := c.drv.opts.KernelDelay
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		return c.run(call, func(kl *launch) {
			A, B, C := devFloats(kl, a), devFloats(kl, b), devFloats(kl, cp)
			round := func(x float32) float32 { return x }
			if mode == cu.TF32Math {
				round = tf32
			}
			for z := 0; z < batch; z++ {
				sgemm(transA, transB, m, n, k, alpha, A[int64(z)*strideA:], lda, B[int64(z)*strideB:], ldb, beta, C[int64(z)*strideC:], ldc, round)
			}
		}, &launch{mem: c.deviceTail, name: call})
	})
	return nil
}

func devFloats(k *launch, p cu.DevicePtr) []float32 {
	b, ok := k.mem(uint64(p))
	if !ok {
		k.fail("%#x is not device memory", uint64(p))
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// sgemm is column-major C = alpha·op(A)·op(B) + beta·C, with C not read
// when beta is 0.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int, round func(float32) float32) {
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var acc float32
			for l := 0; l < k; l++ {
				var x, y float32
				if transA {
					x = a[l+i*lda]
				} else {
					x = a[i+l*lda]
				}
				if transB {
					y = b[j+l*ldb]
				} else {
					y = b[l+j*ldb]
				}
				acc += float32(round(x) * round(y))
			}
			r := alpha * acc
			if beta != 0 {
				r += beta * c[i+j*ldc]
			}
			c[i+j*ldc] = r
		}
	}
}

// tf32 rounds x to the nearest TF32 value (10 mantissa bits).
func tf32(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 { // Inf, NaN
		return x
	}
	return math.Float32frombits((b + 0x1000) &^ 0x1fff)
}

// GemmStridedBatchedEx checks its arguments as cuBLAS does and queues a
// column-major product on the handle's stream, for the element types
// ferry uses with CUBLAS_COMPUTE_32F: bfloat16 A and B with a bfloat16 or
// float32 C, or all float32. Products and sums are float32, in the order
// sgemm takes (a product of two bfloat16 values is exact in float32); a
// bfloat16 C is read widened and written rounded to nearest even, as
// device.ToBFloat16 rounds. Other type combinations answer
// CUBLAS_STATUS_NOT_SUPPORTED.
func (c *Context) GemmStridedBatchedEx(h cu.BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a cu.DevicePtr, typeA cu.DataType, lda int, strideA int64, b cu.DevicePtr, typeB cu.DataType, ldb int, strideB int64,
	beta float32, cp cu.DevicePtr, typeC cu.DataType, ldc int, strideC int64, batch int) error {
	const call = "cublasGemmStridedBatchedEx"
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
		return cu.BLASError(call, cu.BLASInvalidValue)
	}
	delay := c.drv.opts.KernelDelay
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		return c.run(call, func(kl *launch) {
			A, B, C := devMatrix(kl, a, typeA), devMatrix(kl, b, typeB), devMatrix(kl, cp, typeC)
			round := func(x float32) float32 { return x }
			if f32 && mode == cu.TF32Math {
				round = tf32
			}
			for z := 0; z < batch; z++ {
				gemmEx(transA, transB, m, n, k, alpha, A.at(int64(z)*strideA), lda, B.at(int64(z)*strideB), ldb,
					beta, C.at(int64(z)*strideC), ldc, round)
			}
		}, &launch{mem: c.deviceTail, name: call})
	})
	return nil
}

// matrixMem is a cuBLAS operand in device memory: float32 or bfloat16
// elements.
type matrixMem struct {
	f []float32
	h []uint16
}

func devMatrix(k *launch, p cu.DevicePtr, t cu.DataType) matrixMem {
	if t == cu.R32F {
		return matrixMem{f: devFloats(k, p)}
	}
	b, ok := k.mem(uint64(p))
	if !ok {
		k.fail("%#x is not device memory", uint64(p))
	}
	if uint64(p)%2 != 0 {
		k.fail("%#x is not aligned to 2 bytes", uint64(p))
	}
	return matrixMem{h: unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)}
}

// at is the operand from element off on.
func (x matrixMem) at(off int64) matrixMem {
	if x.f != nil {
		return matrixMem{f: x.f[off:]}
	}
	return matrixMem{h: x.h[off:]}
}

func (x matrixMem) get(i int) float32 {
	if x.f != nil {
		return x.f[i]
	}
	return math.Float32frombits(uint32(x.h[i]) << 16)
}

func (x matrixMem) set(i int, v float32) {
	if x.f != nil {
		x.f[i] = v
		return
	}
	x.h[i] = f32ToBF16(math.Float32bits(v))
}

// gemmEx is sgemm over operands of either element type.
func gemmEx(transA, transB bool, m, n, k int, alpha float32, a matrixMem, lda int, b matrixMem, ldb int,
	beta float32, c matrixMem, ldc int, round func(float32) float32) {
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var acc float32
			for l := 0; l < k; l++ {
				var x, y float32
				if transA {
					x = a.get(l + i*lda)
				} else {
					x = a.get(i + l*lda)
				}
				if transB {
					y = b.get(j + l*ldb)
				} else {
					y = b.get(l + j*ldb)
				}
				acc += float32(round(x) * round(y))
			}
			r := alpha * acc
			if beta != 0 {
				r += beta * c.get(i+j*ldc)
			}
			c.set(i+j*ldc, r)
		}
	}
}
