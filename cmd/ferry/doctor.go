package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/internal/isa"
)

func init() {
	register(command{name: "doctor", summary: "report which devices and native libraries ferry found, and why any is unavailable", setup: setupDoctor})
}

type doctorReport struct {
	GoVersion     string      `json:"go_version"`
	OS            string      `json:"os"`
	CPUs          int         `json:"cpus"`
	CPUName       string      `json:"cpu_name"` // model name, family and model
	Kinds         []string    `json:"device_kinds"`
	MatmulBackend string      `json:"cpu_matmul"`
	SIMD          string      `json:"cpu_simd"`            // avx512, avx2 or generic: the CPU's, capped by FERRY_CPU
	CPUError      string      `json:"cpu_error,omitempty"` // the CPU device does not open (FERRY_BLAS names a library that does not load)
	CUDA          cuda.Report `json:"cuda"`
}

func setupDoctor(fs *flag.FlagSet) func(io.Writer, bool) error {
	return func(out io.Writer, asJSON bool) error {
		r := doctorReport{GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), CPUName: cpu.CPUName(),
			Kinds: device.Kinds(), MatmulBackend: cpu.MatmulBackend(), SIMD: isa.Level(), CUDA: cuda.Probe()}
		// Open the CPU device as every command does, so that what stops
		// it (FERRY_BLAS naming a library that does not load) shows here.
		cpuErr := func() error {
			d, err := device.Open("cpu", device.Options{})
			if err != nil {
				return err
			}
			return d.Close()
		}()
		r.CPUError = errString(cpuErr)
		if asJSON {
			if err := writeJSON(out, r); err != nil {
				return err
			}
			if cpuErr != nil {
				return quietError{cpuErr}
			}
			return nil
		}
		fmt.Fprintf(out, "ferry on %s, %s, %d CPUs: %s\n", r.OS, r.GoVersion, r.CPUs, r.CPUName)
		fmt.Fprintf(out, "device kinds: %v\n", r.Kinds)
		if cpuErr != nil {
			fmt.Fprintf(out, "cpu: unavailable: %v\n", cpuErr)
		} else {
			fmt.Fprintf(out, "cpu: available; vector code: %s (FERRY_CPU=avx2|generic lowers it); matrix products: %s\n", r.SIMD, r.MatmulBackend)
		}
		fmt.Fprintf(out, "meta: available (shapes only; exact memory, predicted time with a profile)\n")
		fmt.Fprintln(out, r.CUDA.String())
		return cpuErr
	}
}
