package plan

import (
	"bytes"
	"encoding/json"
	"ferry/internal/fsx"
	"fmt"
	"sort"
	"strings"

	"ferry/device/meta"
)

// Built-in hardware profiles. The GPU figures are datasheet peaks scaled by
// the share of peak that well-tuned code reaches in practice; each says
// which. Their matmul_flops is the FP32 (CUDA core) peak, as ferry's CUDA
// device multiplies float32 without TF32 by default; matmul_bf16_flops is
// the dense (not the 2:4-sparse) BF16 tensor-core peak, derated alike: it
// assumes bfloat16 products go to cuBLAS with float32 accumulation, and
// is about 2× the dense TF32 figure, 15 to 16× the FP32 one. They are predictions' inputs, not measurements: `ferry calibrate`
// measures the machine it runs on, and a measured profile (JSON) always
// beats these.
var builtin = map[string]meta.Profile{
	"h200-pcie5": {
		Name: "h200-pcie5",
		Source: "NVIDIA H200 datasheet: FP32 67 TFLOP/s, HBM3e 4.8 TB/s, 141 GB; PCIe Gen5 x16 64 GB/s per direction. " +
			"Assumed reached: 75% of FP32 peak for large SGEMM, 80% of memory bandwidth, 80% of the link (51 GB/s pinned), " +
			"a PCIe Gen4 NVMe drive at 5 GB/s write and 7 GB/s read, 5 µs per kernel; attention at ferry's tiled kernels' " +
			"FP32 bound with --fmad=false, 60% reached (20.1 TFLOP/s, docs/gpu-estimate.md); " +
			"bfloat16 products on the tensor cores through cuBLAS (float32 accumulation) at the datasheet's dense BF16 989 TFLOP/s " +
			"(1,979 with sparsity; dense TF32 495), 75% reached, as FP32. Collectives among GPUs through PCIe Gen5 (no NVLink): ring bus bandwidth assumed 60% of the link, 20 µs each. Not measured here.",
		MatmulFLOPS: 0.75 * 67e12, MatmulBF16FLOPS: 0.75 * 989e12, MemoryBytesPerSec: 0.8 * 4.8e12, KernelSeconds: 5e-6,
		AttentionFLOPS: attentionFLOPS(67e12), AttentionCausalSkip: true,
		H2DBytesPerSec: 0.8 * 64e9, D2HBytesPerSec: 0.8 * 64e9,
		HostOptimizerBytesPerSec: hostOptimizerRate,
		ElementwiseBF16:          true, // the CUDA device's kernels take bfloat16 views
		DiskWriteBytesPerSec:     5e9, DiskReadBytesPerSec: 7e9, MemoryBytes: 141e9,
		InterconnectBytesPerSec: pcieRingShare * 64e9, InterconnectSeconds: interconnectLatency,
	},
	"h100-pcie5": {
		Name: "h100-pcie5",
		Source: "NVIDIA H100 PCIe datasheet: FP32 51 TFLOP/s, HBM2e 2.0 TB/s, 80 GB; PCIe Gen5 x16 64 GB/s per direction. " +
			"Assumed reached: 75% of FP32 peak, 80% of memory bandwidth, 80% of the link, NVMe 5/7 GB/s, 5 µs per kernel; " +
			"attention at ferry's tiled kernels' FP32 bound with --fmad=false, 60% reached (15.3 TFLOP/s, docs/gpu-estimate.md); " +
			"bfloat16 products on the tensor cores through cuBLAS (float32 accumulation) at the datasheet's dense BF16 756 TFLOP/s " +
			"(1,513 with sparsity; dense TF32 378), 75% reached, as FP32. Collectives among GPUs through PCIe Gen5 (no NVLink): ring bus bandwidth assumed 60% of the link, 20 µs each. Not measured here.",
		MatmulFLOPS: 0.75 * 51e12, MatmulBF16FLOPS: 0.75 * 756e12, MemoryBytesPerSec: 0.8 * 2.0e12, KernelSeconds: 5e-6,
		AttentionFLOPS: attentionFLOPS(51e12), AttentionCausalSkip: true,
		H2DBytesPerSec: 0.8 * 64e9, D2HBytesPerSec: 0.8 * 64e9,
		HostOptimizerBytesPerSec: hostOptimizerRate,
		ElementwiseBF16:          true, // the CUDA device's kernels take bfloat16 views
		DiskWriteBytesPerSec:     5e9, DiskReadBytesPerSec: 7e9, MemoryBytes: 80e9,
		InterconnectBytesPerSec: pcieRingShare * 64e9, InterconnectSeconds: interconnectLatency,
	},
	"a100-pcie4": {
		Name: "a100-pcie4",
		Source: "NVIDIA A100 80GB PCIe datasheet: FP32 19.5 TFLOP/s, HBM2e 1.935 TB/s; PCIe Gen4 x16 32 GB/s per direction. " +
			"Assumed reached: 75% of FP32 peak, 80% of memory bandwidth, 80% of the link (25.6 GB/s), NVMe 5/7 GB/s, 5 µs per kernel; " +
			"attention at ferry's tiled kernels' FP32 bound with --fmad=false, 60% reached (5.9 TFLOP/s, docs/gpu-estimate.md); " +
			"bfloat16 products on the tensor cores through cuBLAS (float32 accumulation) at the datasheet's dense BF16 312 TFLOP/s " +
			"(624 with sparsity; dense TF32 156), 75% reached, as FP32. Collectives among GPUs through PCIe Gen4 (no NVLink): ring bus bandwidth assumed 60% of the link, 20 µs each. Not measured here.",
		MatmulFLOPS: 0.75 * 19.5e12, MatmulBF16FLOPS: 0.75 * 312e12, MemoryBytesPerSec: 0.8 * 1.935e12, KernelSeconds: 5e-6,
		AttentionFLOPS: attentionFLOPS(19.5e12), AttentionCausalSkip: true,
		H2DBytesPerSec: 0.8 * 32e9, D2HBytesPerSec: 0.8 * 32e9,
		HostOptimizerBytesPerSec: hostOptimizerRate,
		ElementwiseBF16:          true, // the CUDA device's kernels take bfloat16 views
		DiskWriteBytesPerSec:     5e9, DiskReadBytesPerSec: 7e9, MemoryBytes: 80e9,
		InterconnectBytesPerSec: pcieRingShare * 32e9, InterconnectSeconds: interconnectLatency,
	},
	"h100-sxm": {
		Name: "h100-sxm",
		Source: "NVIDIA H100 SXM5 datasheet: FP32 67 TFLOP/s, HBM3 3.35 TB/s, 80 GB; PCIe Gen5 x16 64 GB/s per direction; " +
			"NVLink 4 900 GB/s (450 GB/s per direction), 8 GPUs on NVSwitch (HGX H100). " +
			"Assumed reached: 75% of FP32 peak, 80% of memory bandwidth, 80% of the PCIe link, NVMe 5/7 GB/s, 5 µs per kernel; " +
			"attention at ferry's tiled kernels' FP32 bound with --fmad=false, 60% reached (20.1 TFLOP/s, docs/gpu-estimate.md); " +
			"bfloat16 products through cuBLAS at the datasheet's dense BF16 989 TFLOP/s, 75% reached; " +
			"collectives on NVLink: ring bus bandwidth assumed 80% of 450 GB/s (360 GB/s; NVLink SHARP may reach more), 20 µs each. " +
			"Not measured here.",
		MatmulFLOPS: 0.75 * 67e12, MatmulBF16FLOPS: 0.75 * 989e12, MemoryBytesPerSec: 0.8 * 3.35e12, KernelSeconds: 5e-6,
		AttentionFLOPS: attentionFLOPS(67e12), AttentionCausalSkip: true,
		H2DBytesPerSec: 0.8 * 64e9, D2HBytesPerSec: 0.8 * 64e9,
		HostOptimizerBytesPerSec: hostOptimizerRate,
		ElementwiseBF16:          true,
		DiskWriteBytesPerSec:     5e9, DiskReadBytesPerSec: 7e9, MemoryBytes: 80e9,
		InterconnectBytesPerSec: 0.8 * 450e9, InterconnectSeconds: interconnectLatency,
	},
	"h200-sxm": {
		Name: "h200-sxm",
		Source: "NVIDIA H200 SXM datasheet: FP32 67 TFLOP/s, HBM3e 4.8 TB/s, 141 GB; PCIe Gen5 x16 64 GB/s per direction; " +
			"NVLink 4 900 GB/s (450 GB/s per direction), 8 GPUs on NVSwitch (HGX H200). " +
			"Assumed reached: 75% of FP32 peak, 80% of memory bandwidth, 80% of the PCIe link, NVMe 5/7 GB/s, 5 µs per kernel; " +
			"attention at ferry's tiled kernels' FP32 bound with --fmad=false, 60% reached (20.1 TFLOP/s, docs/gpu-estimate.md); " +
			"bfloat16 products through cuBLAS at the datasheet's dense BF16 989 TFLOP/s, 75% reached; " +
			"collectives on NVLink: ring bus bandwidth assumed 80% of 450 GB/s (360 GB/s), 20 µs each. Not measured here.",
		MatmulFLOPS: 0.75 * 67e12, MatmulBF16FLOPS: 0.75 * 989e12, MemoryBytesPerSec: 0.8 * 4.8e12, KernelSeconds: 5e-6,
		AttentionFLOPS: attentionFLOPS(67e12), AttentionCausalSkip: true,
		H2DBytesPerSec: 0.8 * 64e9, D2HBytesPerSec: 0.8 * 64e9,
		HostOptimizerBytesPerSec: hostOptimizerRate,
		ElementwiseBF16:          true,
		DiskWriteBytesPerSec:     5e9, DiskReadBytesPerSec: 7e9, MemoryBytes: 141e9,
		InterconnectBytesPerSec: 0.8 * 450e9, InterconnectSeconds: interconnectLatency,
	},
	// Measured on the 2-core development machine (AMD EPYC, Zen 5) with
	// `ferry calibrate --json` on 2026-12-02 (OpenBLAS 0.3.21, Debian
	// bookworm); see docs/plan.md. Host link = memcpy between the CPU
	// device and its host; disk = page-cache writes and reads, as the
	// offloader does them.
	"cpu": cpuProfile,
	// The same machine, fitted on a small GPT's training steps (ferry calibrate --model gpt).
	"cpu-gpt": cpuGPTProfile,
}

// attentionFLOPS is the rate ferry's tiled CUDA attention kernels are
// assumed to reach on a GPU of FP32 peak fp32: their PTX keeps multiply
// and add apart (--fmad=false, so that results follow the CPU device), a
// ceiling of half the peak, of which 60% is assumed reached
// (docs/gpu-estimate.md). An estimate from the kernels' source, to be
// confirmed on a GPU.
func attentionFLOPS(fp32 float64) float64 { return 0.3 * fp32 }

// pcieRingShare is the share of a PCIe link's rate the GPU profiles
// without NVLink assume a ring collective's bus bandwidth reaches
// (peer-to-peer through the PCIe switch), and interconnectLatency the
// fixed cost they assume per collective. Assumptions, not measurements.
// The CPU profiles model no interconnect: their ranks' collectives (MPI
// in shared memory) take no time in a plan.
const (
	pcieRingShare       = 0.6
	interconnectLatency = 20e-6
)

// hostOptimizerRate is what the GPU profiles assume an optimizer stepping
// on the host (optim.OnHost) moves there, reads plus writes: 50 GB/s, about
// half a server's copy bandwidth over 16 cores. An assumption, not a
// measurement: `ferry calibrate` measures the machine it runs on.
const hostOptimizerRate = 50e9

// Profiles lists the built-in profiles' names.
func Profiles() []string {
	var names []string
	for n := range builtin {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LoadProfile returns a built-in profile by name, or reads one from a JSON
// file (as `ferry calibrate --json` writes).
func LoadProfile(nameOrPath string) (*meta.Profile, error) {
	if p, ok := builtin[nameOrPath]; ok {
		return &p, nil
	}
	b, err := fsx.ReadLimited(nameOrPath, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("profile %q is neither built in (%s) nor a readable file: %v", nameOrPath, strings.Join(Profiles(), ", "), err)
	}
	var p meta.Profile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a misspelt field would silently read as 0
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("profile %s is not a profile (a JSON object as ferry calibrate --save writes): %w", nameOrPath, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("profile %s: more than one JSON value", nameOrPath)
	}
	if p.Name == "" {
		p.Name = nameOrPath
	}
	return &p, p.Validate()
}
