package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
)

func init() {
	register(command{name: "doctor", summary: "report which devices and native libraries ferry found, and why any is unavailable", setup: setupDoctor})
}

type doctorReport struct {
	GoVersion     string      `json:"go_version"`
	OS            string      `json:"os"`
	CPUs          int         `json:"cpus"`
	Kinds         []string    `json:"device_kinds"`
	MatmulBackend string      `json:"cpu_matmul"`
	CUDA          cuda.Report `json:"cuda"`
}

func setupDoctor(fs *flag.FlagSet) func(io.Writer, bool) error {
	return func(out io.Writer, asJSON bool) error {
		r := doctorReport{GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
			Kinds: device.Kinds(), MatmulBackend: cpu.MatmulBackend(), CUDA: cuda.Probe()}
		if asJSON {
			return writeJSON(out, r)
		}
		fmt.Fprintf(out, "ferry on %s, %s, %d CPUs\n", r.OS, r.GoVersion, r.CPUs)
		fmt.Fprintf(out, "device kinds: %v\n", r.Kinds)
		fmt.Fprintf(out, "cpu: available; matrix products: %s\n", r.MatmulBackend)
		fmt.Fprintf(out, "meta: available (shapes only; exact memory, predicted time with a profile)\n")
		fmt.Fprintln(out, r.CUDA.String())
		return nil
	}
}
