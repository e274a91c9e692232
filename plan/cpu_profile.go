package plan

import "ferry/device/meta"

// cpuProfile is this project's 2-core development machine (AMD EPYC, Zen 5,
// AVX-512 and AVX512_BF16; the pure-Go matrix kernel) as measured by
//
//	ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 --save FILE
//
// on 2026-12-06 (1-minute load average 1.2 as it started: another
// engineer's jobs come and go). Products timed at the MLP's own shape
// (Linear(1024) at 128 rows); host link = memcpy between the CPU device
// and its host allocator on a side stream; disk = page-cache writes and
// reads of a 256 MiB file, and the fixed cost of one transfer as the
// offloader's disk tier makes it (a file created unlinked, its bytes, a
// hand-off to the disk goroutine and back); the elementwise rate, the
// host optimizer's rate and the copy share fitted to training steps of
// that MLP (SGD): everything on the device; the optimizer's state and the
// gradients on the host; the parameters there too. The host is the
// device (HostSharesCompute). It was refitted when the matrix products
// moved to the pure-Go AVX-512 kernel and the fused kernels came: the
// 2026-12-02 profile (matmul 344 GFLOP/s, elementwise 30.8 GB/s, copy
// share 6.0, no host optimizer rate) predicted this MLP's step in mode
// none at 0.66 × the measured one, its host placements at 0.78–1.01 ×.
// See docs/plan.md ("A clock checked against the CPU") for how well this
// one predicts.
var cpuProfile = meta.Profile{
	Name:                     "cpu",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 on 2026-12-06",
	MatmulFLOPS:              1.889e+11,
	MatmulBF16FLOPS:          3.613e+11,
	ElementwiseBF16:          true, // the CPU device's kernels take bfloat16 views
	MemoryBytesPerSec:        7.084e+10,
	KernelSeconds:            4.03e-08,
	H2DBytesPerSec:           2.312e+10,
	D2HBytesPerSec:           5.108e+10,
	DiskWriteBytesPerSec:     1.141e+10,
	DiskReadBytesPerSec:      1.848e+10,
	DiskSeconds:              8.6e-05,
	HostOptimizerBytesPerSec: 1.870e+10,
	CopyComputeShare:         0,
	HostSharesCompute:        true,
	MemoryBytes:              24 << 30,
}

// cpuGPTProfile is the same machine as measured by
//
//	ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 --save FILE
//
// on 2026-12-06 (1-minute load average 1.3 as it started): products timed
// at the small GPT's own width (Linear(128) at 4 × 64 rows), the
// elementwise rate, the host optimizer's rate and the copy share fitted to
// training steps of that GPT (4 layers, 4 heads, embedding 128, sequence
// 64, vocabulary 256, batch 4, AdamW) as for cpuProfile. Everything such a
// GPT does beyond its products (attention, softmax, layer norm, GELU, the
// tensor layer's own work) is charged to the elementwise rate. Use it to
// plan small GPTs on this CPU. It replaces the 2026-12-03 fit at batch 16
// (matmul 250 GFLOP/s, elementwise 7.3 GB/s, copy share 1.55, no host
// optimizer rate), which predicted this GPT's steps at 1.12–1.49 × the
// measured ones (docs/plan.md, "A clock checked against the CPU").
var cpuGPTProfile = meta.Profile{
	Name:                     "cpu-gpt",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 on 2026-12-06",
	MatmulFLOPS:              1.987e+11,
	MatmulBF16FLOPS:          3.262e+11,
	ElementwiseBF16:          true,
	MemoryBytesPerSec:        1.852e+10,
	KernelSeconds:            4.02e-08,
	H2DBytesPerSec:           2.695e+10,
	D2HBytesPerSec:           5.038e+10,
	DiskWriteBytesPerSec:     1.375e+10,
	DiskReadBytesPerSec:      2.007e+10,
	DiskSeconds:              1.36e-05,
	HostOptimizerBytesPerSec: 1.331e+10,
	CopyComputeShare:         2.068,
	HostSharesCompute:        true,
	MemoryBytes:              24 << 30,
}
