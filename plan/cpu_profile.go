package plan

import "ferry/device/meta"

// cpuProfile is this project's 2-core development machine (AMD EPYC, Zen 5,
// AVX-512 and AVX512_BF16; the pure-Go matrix kernel) as measured by
//
//	ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 --save FILE
//
// on 2026-12-07, the middle (by matrix-product rate) of three runs in a
// row (products 214, 213 and 212 GFLOP/s; elementwise 31.4, 36.8 and 22.8
// GB/s; host optimizer 17.2, 20.9 and 42.2 GB/s; copy share 0.64, 0.62
// and 0.65), each time the tenth percentile of those taken (the machine
// with nothing else running; plan.FastQuantile; for the fitted steps,
// each run's, the median over the runs). Products timed at the
// MLP's own shape (Linear(1024) at 128 rows); host link = memcpy between
// the CPU device and its host allocator on a side stream, from written
// memory (until 2026-12-07 the device block was never written, and the
// copy to the host read the zero page at 52 GB/s); the copy share = what
// such copies take from those products running beside them; disk =
// page-cache writes and reads of a 256 MiB file, and round trips of one
// file as the offloader's disk tier makes them after a step's first (see
// cpuDiskNote); the elementwise rate and the host optimizer's rate fitted
// to training steps of that MLP (SGD): everything on the device; the
// optimizer's state and the gradients on the host. The host is the
// device (HostSharesCompute). Earlier fits: 2026-12-06 (medians rather
// than the fast end: products 213 GFLOP/s, elementwise 35.4 GB/s, host
// optimizer 15.8 GB/s, copy share 0.885, to host 52.5 GB/s); 2026-12-02
// (matmul 344 GFLOP/s, before the pure-Go AVX-512 kernel, elementwise
// 30.8 GB/s, copy share 6.0, no host optimizer rate), which predicted
// this MLP's step in mode none at 0.66 × the measured one. See
// docs/plan.md ("A clock checked against the CPU") for how well this one
// predicts.
var cpuProfile = meta.Profile{
	Name:                     "cpu",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model mlp --layers 16 --width 1024 --batch 128 --seconds 1 on 2026-12-07 (the middle of three runs; each time the tenth percentile of those taken)",
	MatmulFLOPS:              2.128e+11,
	MatmulBF16FLOPS:          3.886e+11,
	ElementwiseBF16:          true, // the CPU device's kernels take bfloat16 views
	MemoryBytesPerSec:        3.683e+10,
	KernelSeconds:            6.47e-08,
	H2DBytesPerSec:           2.302e+10,
	D2HBytesPerSec:           2.188e+10,
	DiskWriteBytesPerSec:     1.315e+10,
	DiskReadBytesPerSec:      1.89e+10,
	DiskSeconds:              0, // see cpuDiskNote
	HostOptimizerBytesPerSec: 2.085e+10,
	CopyComputeShare:         0.6201,
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
// (docs/plan.md, "The machine at its own speed").

// cpuGPTProfile is the same machine as measured by
//
//	ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 --save FILE
//
// on 2026-12-07, the middle (by matrix-product rate) of three runs in a
// row (products 205, 172 and 205 GFLOP/s; elementwise 15.3, 16.8 and 15.2
// GB/s; host optimizer 13.1, 13.8 and 13.5 GB/s; copy share 0.62, 0.56
// and 0.57), each time the tenth percentile of those taken: products
// timed at the small GPT's own width (Linear(128) at 4 × 64 rows), the
// copy share measured beside them, the elementwise rate and the host
// optimizer's rate fitted to training steps of that GPT (4 layers, 4
// heads, embedding 128, sequence 64, vocabulary 256, batch 4, AdamW) as
// for cpuProfile. Everything such a GPT does beyond its products
// (attention, softmax, layer norm, GELU, the tensor layer's own work) is
// charged to the elementwise rate. Use it to plan small GPTs on this CPU.
// Its step is 14–16 ms at the machine's own speed; a minute's swing of
// this shared machine moves the median step by a fifth. It replaces the
// 2026-12-06 fit (medians: products 208 GFLOP/s, elementwise 11.0 GB/s,
// host optimizer 9.2 GB/s, copy share 0.63, to host 51 GB/s from the
// zero page), the first 2026-12-06 fit (copy share fitted to 2.07), and
// the 2026-12-03 fit at batch 16 (matmul 250 GFLOP/s, elementwise 7.3
// GB/s, copy share 1.55, no host optimizer rate), which predicted this
// GPT's steps at 1.12–1.49 × the measured ones (docs/plan.md, "A clock
// checked against the CPU").
var cpuGPTProfile = meta.Profile{
	Name:                     "cpu-gpt",
	Source:                   "measured on the 2-core development machine (AMD EPYC Zen 5, AVX-512) by ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4 --seconds 1 on 2026-12-07 (the middle of three runs; each time the tenth percentile of those taken)",
	MatmulFLOPS:              2.055e+11,
	MatmulBF16FLOPS:          3.436e+11,
	ElementwiseBF16:          true,
	MemoryBytesPerSec:        1.517e+10,
	KernelSeconds:            3.876e-08,
	H2DBytesPerSec:           2.168e+10,
	D2HBytesPerSec:           2.107e+10,
	DiskWriteBytesPerSec:     1.085e+10,
	DiskReadBytesPerSec:      1.518e+10,
	DiskSeconds:              0, // see cpuDiskNote
	HostOptimizerBytesPerSec: 1.354e+10,
	CopyComputeShare:         0.5651,
	HostSharesCompute:        true,
	MemoryBytes:              24 << 30,
}
