package cuda

import (
	"fmt"
	"sort"
	"strings"

	"ferry/device/cuda/cu"
)

// Report is what Probe found, for `ferry doctor`: which libraries loaded
// from where, which GPUs there are, and why anything is unavailable. It
// marshals to JSON as is; String writes it for people.
type Report struct {
	// Available is true when cuda:0 can be opened.
	Available bool `json:"available"`
	// Reason says why not, when it cannot.
	Reason string `json:"reason,omitempty"`

	DriverLibrary string `json:"driver_library,omitempty"` // path of libcuda.so.1
	DriverVersion string `json:"driver_version,omitempty"` // "12.4": the CUDA version the driver supports
	BLASLibrary   string `json:"cublas_library,omitempty"` // path of libcublas
	BLASVersion   string `json:"cublas_version,omitempty"` // "12.4.5"
	// BLASReason says why cuBLAS is not used (matrix products then run on
	// ferry's own, much slower, kernel).
	BLASReason string `json:"cublas_reason,omitempty"`

	Devices []DeviceReport `json:"devices,omitempty"`
	// Kernels lists the embedded PTX modules and their kernel count.
	Kernels string `json:"kernels"`
}

// DeviceReport describes one GPU.
type DeviceReport struct {
	Name              string `json:"name"` // "cuda:0"
	Model             string `json:"model"`
	MemoryBytes       int64  `json:"memory_bytes"`
	ComputeCapability string `json:"compute_capability"` // "9.0"
	Multiprocessors   int    `json:"multiprocessors"`
	Error             string `json:"error,omitempty"`
}

// Probe loads the real driver (if it can) and reports what it finds. It
// never panics and opens no context.
func Probe() Report {
	drv, err := cu.Load()
	if err != nil {
		r := Report{Reason: err.Error(), Kernels: kernelSummary()}
		return r
	}
	return ProbeDriver(drv)
}

// ProbeDriver reports on drv (the fake driver, in tests).
func ProbeDriver(drv cu.Driver) Report {
	r := Report{Kernels: kernelSummary()}
	info := drv.Info()
	r.DriverLibrary = info.DriverLib
	if v := info.DriverVersion; v > 0 {
		r.DriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	r.BLASLibrary = info.BLASLib
	if v := info.BLASVersion; v > 0 {
		r.BLASVersion = fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	r.BLASReason = info.BLASError
	n, err := drv.DeviceCount()
	if err != nil {
		r.Reason = err.Error()
		return r
	}
	if n == 0 {
		r.Reason = cu.ErrNoGPU.Error()
		if info.InitError != "" {
			r.Reason += " (" + info.InitError + ")"
		}
		return r
	}
	for i := 0; i < n; i++ {
		dr := DeviceReport{Name: fmt.Sprintf("cuda:%d", i)}
		p, err := drv.Device(i)
		if err != nil {
			dr.Error = err.Error()
		} else {
			dr.Model, dr.MemoryBytes, dr.Multiprocessors = p.Name, p.TotalMem, p.SMs
			dr.ComputeCapability = fmt.Sprintf("%d.%d", p.Major, p.Minor)
			if p.Major < 8 {
				dr.Error = "compute capability below 8.0: the embedded PTX (compute_80) cannot run here"
			}
		}
		r.Devices = append(r.Devices, dr)
	}
	r.Available = r.Devices[0].Error == ""
	if !r.Available {
		r.Reason = "cuda:0: " + r.Devices[0].Error
	}
	return r
}

func kernelSummary() string {
	images := PTX()
	var parts []string
	for name, img := range images {
		entries, err := cu.ParsePTX(img)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%d kernels)", strings.TrimPrefix(name, "kernels/"), len(entries)))
	}
	sort.Strings(parts)
	return "PTX for compute_80: " + strings.Join(parts, ", ")
}

// String writes the report for people, one fact per line.
func (r Report) String() string {
	var b strings.Builder
	if r.Available {
		b.WriteString("CUDA: available\n")
	} else {
		fmt.Fprintf(&b, "CUDA: unavailable: %s\n", r.Reason)
	}
	if r.DriverLibrary != "" {
		fmt.Fprintf(&b, "  driver:  %s (CUDA %s)\n", r.DriverLibrary, r.DriverVersion)
	}
	if r.BLASLibrary != "" {
		fmt.Fprintf(&b, "  cuBLAS:  %s (%s)\n", r.BLASLibrary, r.BLASVersion)
	} else if r.BLASReason != "" {
		fmt.Fprintf(&b, "  cuBLAS:  not loaded: %s\n", r.BLASReason)
	}
	for _, d := range r.Devices {
		if d.Model != "" {
			fmt.Fprintf(&b, "  %s: %s, %.1f GiB, compute capability %s, %d SMs\n",
				d.Name, d.Model, float64(d.MemoryBytes)/(1<<30), d.ComputeCapability, d.Multiprocessors)
		}
		if d.Error != "" {
			fmt.Fprintf(&b, "  %s: %s\n", d.Name, d.Error)
		}
	}
	fmt.Fprintf(&b, "  kernels: %s\n", r.Kernels)
	return b.String()
}
