package device

// Optional kernel families for transformers. A device implements any of
// them on its Kernels value; the tensor layer finds them by type assertion
// and, where a device lacks one, composes the op from the core Kernels (or,
// where no composition exists, reports ErrNotSupported naming the family).
// A new family therefore never has to land on every device at once, as
// database/sql's optional driver interfaces.
//
// The meta device implements every family, allocating nothing itself, so
// that it allocates exactly what the CPU device does.

// EmbeddingKernels gather rows of a table by int32 indices and scatter
// gradients back.
type EmbeddingKernels interface {
	// Gather writes table[idx[r], :] into row r of dst. dst is contiguous
	// [n, C], table contiguous [V, C], idx contiguous Int32 [n]. An index
	// outside [0, V) is an error that names it; dst is then unspecified.
	Gather(dst, table, idx View) error
	// ScatterAdd adds row r of src into dst[idx[r], :], for r in order, so
	// repeated indices are summed deterministically. dst contiguous [V, C],
	// src contiguous [n, C], idx as for Gather.
	ScatterAdd(dst, src, idx View) error
}

// LayerNormKernels normalise rows over the last axis (PyTorch's layer_norm),
// keeping only per-row statistics for backward.
type LayerNormKernels interface {
	// LayerNorm writes (x - mean)·rstd·weight + bias into dst and each
	// row's mean and rstd = 1/√(var + eps) (biased variance) into mean and
	// rstd. x and dst are contiguous [rows, C]; mean and rstd contiguous
	// [rows]; weight and bias contiguous [C], or a View with a nil Block
	// when absent.
	LayerNorm(dst, mean, rstd, x, weight, bias View, eps float32) error
	// LayerNormBackward writes the gradient with respect to x into dx and,
	// unless their Block is nil, the gradients of weight and bias into
	// dweight and dbias (overwritten, not accumulated). grad, x and dx are
	// contiguous [rows, C].
	LayerNormBackward(dx, dweight, dbias, grad, x, mean, rstd, weight View) error
}

// AttentionParams configure scaled dot-product attention.
type AttentionParams struct {
	Causal  bool    // position i attends to positions j ≤ i only
	Scale   float32 // the factor on q·k (the caller resolves 0 to 1/√D)
	Dropout float32 // probability of zeroing an attention weight
	Key     DropoutKey
}

// AttentionKernels compute softmax(scale·q·kᵀ + mask)·v without keeping the
// T×T attention matrix: forward saves only the output and each row's
// log-sum-exp, and backward recomputes the weights from them (the
// FlashAttention scheme). q, k, v and grad are [B, H, T, D] views whose
// last axis has stride 1 (other strides arbitrary); out, dq, dk and dv are
// contiguous [B, H, T, D]; lse is contiguous [B, H, T].
type AttentionKernels interface {
	Attention(out, lse, q, k, v View, p AttentionParams) error
	AttentionBackward(dq, dk, dv, grad, q, k, v, out, lse View, p AttentionParams) error
}

// DropoutKernels apply inverted dropout with masks drawn from Philox
// (see DropoutKeep), so the same key gives the same mask on every device
// and in every run.
type DropoutKernels interface {
	// Dropout writes src·keep/(1-p) into dst, keep being DropoutKeep for
	// each element's index in src's row-major order. dst and src are
	// contiguous and of one shape; dst may be src. Backward is the same
	// call on the gradient.
	Dropout(dst, src View, p float32, key DropoutKey) error
}

// DropoutKey names one draw of dropout masks: the run's seed, the op that
// draws (a stable id of its module path) and the training step. A forward
// replayed with the same key (recomputation) draws the same mask.
//
// Offset places the tensor inside a larger mask: its element i draws as
// element Offset+i of the mask of the same key. Data parallelism uses it
// so that a rank holding rows [r·B, (r+1)·B) of a batch draws exactly the
// masks a single process drew for those rows (Offset = r·B·elements per
// row); it is 0 otherwise.
type DropoutKey struct {
	Seed, Op, Step uint64
	Offset         uint64
}

// Philox4x32 is the Philox-4×32-10 counter-based generator of Salmon et
// al. (2011), as in cuRAND and PyTorch: four 32-bit outputs per counter.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	for i := 0; i < 10; i++ {
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{
			uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1),
			uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0),
		}
		key[0] += w0
		key[1] += w1
	}
	return ctr
}

// splitmix64 mixes the op id into the seed.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// PhiloxKey is the generator key and counter high words for k: the key is
// the seed mixed with the op; the counter's last two words are the step.
func (k DropoutKey) PhiloxKey() (key [2]uint32, step [2]uint32) {
	s := k.Seed ^ splitmix64(k.Op)
	return [2]uint32{uint32(s), uint32(s >> 32)}, [2]uint32{uint32(k.Step), uint32(k.Step >> 32)}
}

// DropoutBits writes 4 uniform 32-bit draws for mask elements 4n … 4n+3
// (mask elements: Offset is not applied here).
func (k DropoutKey) DropoutBits(n uint64) [4]uint32 {
	key, step := k.PhiloxKey()
	return Philox4x32([4]uint32{uint32(n), uint32(n >> 32), step[0], step[1]}, key)
}

// DropoutThreshold is the draw below which an element is dropped with
// probability p: element i is kept when its draw (lane i%4 of
// DropoutBits(i/4)) is ≥ the threshold.
func DropoutThreshold(p float32) uint32 {
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return ^uint32(0)
	}
	return uint32(float64(p) * (1 << 32))
}

// DropoutKeep reports whether element i of the tensor survives dropout p
// under key: the draw of mask element k.Offset+i.
func DropoutKeep(k DropoutKey, p float32, i uint64) bool {
	if p >= 1 {
		return false
	}
	i += k.Offset
	return k.DropoutBits(i / 4)[i%4] >= DropoutThreshold(p)
}

// CrossEntropyKernels fuse the log-softmax over the classes with the
// negative log-likelihood (a language model's loss over its vocabulary),
// so that the log-probabilities, as large as the logits, are never made.
// Each computes what Softmax(log) followed by NLL (and their backward
// kernels) compute, in the same float32 and float64 operations, so with
// the same bits on the same device.
type CrossEntropyKernels interface {
	// CrossEntropy writes, for logits [rows, classes] (contiguous) and
	// int32 target [rows] (a negative target: the row is ignored), each
	// row's maximum and log of the sum of exp(x - maximum) into stats
	// [rows, 2], and into the scalar loss the mean over the rows not
	// ignored of -(x[target] - maximum - log-sum), NaN when every row is
	// ignored.
	CrossEntropy(loss, stats, logits, target View) error
	// CrossEntropyBackward writes into dlogits [rows, classes] the
	// gradient of that mean times the scalar grad: for a row not ignored,
	// g[j] - exp(x[j] - maximum - log-sum)·g[target], with g the one-hot
	// -grad/(rows not ignored) at the target; zeros for an ignored row.
	CrossEntropyBackward(dlogits, grad, logits, stats, target View) error
}
