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
	MemoryBytesPerSec:    3.082e+10,
	KernelSeconds:        4.45e-08,
	H2DBytesPerSec:       2.515e+10,
	D2HBytesPerSec:       2.564e+10,
	DiskWriteBytesPerSec: 9.616e+09,
	DiskReadBytesPerSec:  2.154e+10,
	CopyComputeShare:     6.01,
	MemoryBytes:          24 << 30,
}
