package plan

import "ferry/device/meta"

// cpuProfile is this project's 2-core development machine (AMD EPYC, Zen 5,
// AVX-512; the pure-Go matrix kernel) as measured by
//
//	ferry calibrate --seconds 1 --json
//
// on 2026-12-02, idle but for the usual background load. Host link =
// memcpy between the CPU device and its host allocator on a side stream;
// disk = page-cache writes and reads of a 256 MiB file, as the offloader's
// disk tier makes them; elementwise rate and copy share fitted to training
// steps (see docs/plan.md for how well it predicts).
var cpuProfile = meta.Profile{
	Name:                 "cpu",
	Source:               "measured on the 2-core development machine (AMD EPYC Zen 5) by ferry calibrate --seconds 1 on 2026-12-02",
	MatmulFLOPS:          3.444e+11,
	ElementwiseBF16:      true, // the CPU device's kernels take bfloat16 views
	MemoryBytesPerSec:    3.082e+10,
	KernelSeconds:        4.45e-08,
	H2DBytesPerSec:       2.515e+10,
	D2HBytesPerSec:       2.564e+10,
	DiskWriteBytesPerSec: 9.616e+09,
	DiskReadBytesPerSec:  2.154e+10,
	CopyComputeShare:     6.01,
	MemoryBytes:          24 << 30,
}

// cpuGPTProfile is the same machine as measured by
//
//	ferry calibrate --model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 16 --seconds 1 --save FILE
//
// on 2026-12-03 with other engineers' jobs running: products timed at the
// small GPT's own width (Linear(128) at 16 × 64 rows), the elementwise rate
// and copy share fitted to training steps of that GPT (4 layers, 4 heads,
// embedding 128, sequence 64, vocabulary 256, batch 16, AdamW) in modes
// none and offload. Everything such a GPT does beyond its products
// (attention, softmax, layer norm, GELU, AdamW, the tensor layer's own
// work) is charged to the elementwise rate, hence its 7.3 GB/s against the
// MLP-fitted profile's 31. Use it to plan small GPTs on this CPU; see
// docs/plan.md for how well it predicts modes it was not fitted on.
var cpuGPTProfile = meta.Profile{
	Name:                 "cpu-gpt",
	Source:               "measured on the 2-core development machine (AMD EPYC Zen 5) by ferry calibrate --model gpt --seconds 1 on 2026-12-03",
	MatmulFLOPS:          2.504e+11,
	ElementwiseBF16:      true,
	MemoryBytesPerSec:    7.277e+09,
	KernelSeconds:        4.31e-08,
	H2DBytesPerSec:       2.658e+10,
	D2HBytesPerSec:       2.656e+10,
	DiskWriteBytesPerSec: 8.098e+09,
	DiskReadBytesPerSec:  2.102e+10,
	CopyComputeShare:     1.553,
	MemoryBytes:          24 << 30,
}
