package plan

import "ferry/device/meta"

// cpuProfile is this project's 2-core development machine (AMD EPYC, Zen 5,
// AVX-512 and AVX512_BF16; the pure-Go matrix kernel) as measured by
//
//	ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 --save FILE
//
// on 2026-12-06, the middle (by matrix-product rate) of three runs in a
// row (products 212, 213 and 214 GFLOP/s; elementwise 29.8, 35.4 and 30.1
// GB/s; host optimizer 17.0, 15.8 and 15.6 GB/s; copy share 0.85, 0.89
// and 0.87). Products timed at the MLP's own shape (Linear(1024) at 128
// rows); host link = memcpy between the CPU device and its host allocator
// on a side stream; the copy share = what such copies take from those
// products running beside them (measured since 2026-12-06; fitted before,
// it swung from 0 to 6 fit to fit); disk = page-cache writes and reads of
// a 256 MiB file, and the fixed cost of one transfer as the offloader's
// disk tier makes it (a file created unlinked, its bytes, a hand-off to
// the disk goroutine and back); the elementwise rate and the host
// optimizer's rate fitted to training steps of that MLP (SGD): everything
// on the device; the optimizer's state and the gradients on the host. The
// host is the device (HostSharesCompute). Earlier fits: 2026-12-02
// (matmul 344 GFLOP/s, before the pure-Go AVX-512 kernel, elementwise
// 30.8 GB/s, copy share 6.0, no host optimizer rate) predicted this MLP's
// step in mode none at 0.66 × the measured one; the first 2026-12-06 fit
// (copy share fitted to 0) predicted the parameters on the host at 0.80 ×
// in this session. See docs/plan.md ("A clock checked against the CPU")
// for how well this one predicts.
var cpuProfile = meta.Profile{
	Name:                     "cpu",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 on 2026-12-06 (the middle of three runs; the copy share measured)",
	MatmulFLOPS:              2.135e+11,
	MatmulBF16FLOPS:          3.859e+11,
	ElementwiseBF16:          true, // the CPU device's kernels take bfloat16 views
	MemoryBytesPerSec:        3.537e+10,
	KernelSeconds:            4.016e-08,
	H2DBytesPerSec:           2.167e+10,
	D2HBytesPerSec:           5.249e+10,
	DiskWriteBytesPerSec:     1.093e+10,
	DiskReadBytesPerSec:      1.59e+10,
	DiskSeconds:              0, // see cpuDiskNote
	HostOptimizerBytesPerSec: 1.579e+10,
	CopyComputeShare:         0.885,
	HostSharesCompute:        true,
	MemoryBytes:              24 << 30,
}

// cpuDiskNote: both profiles' fixed cost per disk transfer was measured
// again on 2026-12-07, once the disk tier wrote over the files of the step
// before instead of making a file for each tensor (offload/disk.go). The
// round trips of one file (512 KiB for the MLP, 128 KiB for the GPT) took
// less than their bytes at the 256 MiB file's rates in three runs of
// each (ferry calibrate, as above): no fixed cost is left. The
// 2026-12-06 figures, 17 and 30 µs, were a new file's creation and
// closing, which cost a small GPT's step 8 to 10 ms on the CPU device
// (docs/plan.md, "The disk tier's files reused").

// cpuGPTProfile is the same machine as measured by
//
//	ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 --save FILE
//
// on 2026-12-06, the middle (by matrix-product rate) of three runs in a
// row (products 138, 208 and 213 GFLOP/s; elementwise 26.6, 11.0 and 16.0
// GB/s; host optimizer 10.7, 9.2 and 10.1 GB/s; copy share 0.39, 0.63 and
// 0.80): products timed at the small GPT's own width (Linear(128) at 4 ×
// 64 rows), the copy share measured beside them, the elementwise rate and
// the host optimizer's rate fitted to training steps of that GPT (4
// layers, 4 heads, embedding 128, sequence 64, vocabulary 256, batch 4,
// AdamW) as for cpuProfile. Everything such a GPT does beyond its
// products (attention, softmax, layer norm, GELU, the tensor layer's own
// work) is charged to the elementwise rate. Use it to plan small GPTs on
// this CPU. Its step is 15–20 ms: a minute's swing of this shared
// machine moves it by a fifth. It replaces the first 2026-12-06 fit
// (copy share fitted to 2.07), and that the 2026-12-03 fit at batch 16
// (matmul 250 GFLOP/s, elementwise 7.3 GB/s, copy share 1.55, no host
// optimizer rate), which predicted this GPT's steps at 1.12–1.49 × the
// measured ones (docs/plan.md, "A clock checked against the CPU").
var cpuGPTProfile = meta.Profile{
	Name:                     "cpu-gpt",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 on 2026-12-06 (the middle of three runs; the copy share measured)",
	MatmulFLOPS:              2.084e+11,
	MatmulBF16FLOPS:          3.495e+11,
	ElementwiseBF16:          true,
	MemoryBytesPerSec:        1.104e+10,
	KernelSeconds:            7.351e-08,
	H2DBytesPerSec:           1.359e+10,
	D2HBytesPerSec:           5.105e+10,
	DiskWriteBytesPerSec:     8.165e+09,
	DiskReadBytesPerSec:      1.3e+10,
	DiskSeconds:              0, // see cpuDiskNote
	HostOptimizerBytesPerSec: 9.154e+09,
	CopyComputeShare:         0.631,
	HostSharesCompute:        true,
	MemoryBytes:              24 << 30,
}
