package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	"ferry/device/cuda/cu"
)

// The kernels are compiled to PTX for compute capability 8.0 (Ampere); the
// driver JIT-compiles PTX for the GPU it runs on (Hopper included) at
// Open, and caches the result (~/.nv/ComputeCache). --fmad=false keeps
// a*b+c unfused, as Go computes it on amd64, so results match the CPU
// device's operation by operation. The committed PTX comes from CUDA 11.8's
// nvcc (PTX ISA 7.8), which any driver of R520 or later loads; a newer nvcc
// writes a newer ISA and so needs a newer driver. Regenerate after changing
// a .cu file or a header with `go generate ./device/cuda` (needs nvcc),
// which then records what it compiled (kernels/ptx.sum, Note [PTX sums]
// in kernels/ptxsum.go): TestPTXSourcesUnchanged fails, without nvcc,
// when a source changed and its PTX was not regenerated.
//
//go:generate sh -c "for f in kernels/*.cu; do nvcc -ptx -arch=compute_80 --fmad=false -O3 -o ${DOLLAR}{f%.cu}.ptx ${DOLLAR}f || exit 1; done"
//go:generate go run ./internal/ptxsum

//go:embed kernels/*.ptx
var ptxFS embed.FS

// PTX returns the embedded PTX images by file name, for tests and tools.
func PTX() map[string][]byte {
	out := map[string][]byte{}
	files, _ := fs.Glob(ptxFS, "kernels/*.ptx")
	for _, f := range files {
		b, _ := ptxFS.ReadFile(f)
		out[f] = b
	}
	return out
}

// loadKernels loads every embedded module and looks up each kernel it
// declares, so that a JIT failure shows at Open, not at the first launch.
func (d *Device) loadKernels() error {
	images := PTX()
	names := make([]string, 0, len(images))
	for n := range images {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, file := range names {
		img := images[file]
		entries, err := cu.ParsePTX(img)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		m, err := d.ctx.ModuleLoadData(img)
		if err != nil {
			return fmt.Errorf("loading kernels %s: %w", file, err)
		}
		d.modules = append(d.modules, m)
		for _, e := range entries {
			f, err := d.ctx.ModuleGetFunction(m, e.Name)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			d.funcs[e.Name] = f
		}
	}
	return nil
}
