// Package kernels holds the CUDA C++ sources of ferry's GPU kernels. The
// CUDA device embeds their PTX (device/cuda/ptx.go); this package embeds
// the sources themselves, so that tests compile and run them on the CPU
// (device/cuda/standin).
package kernels

import (
	"embed"
	"io/fs"
	"regexp"
	"sort"
)

//go:embed *.cu *.cuh
var sources embed.FS

// Sources returns every .cu and .cuh file by name.
func Sources() map[string][]byte {
	out := map[string][]byte{}
	names, _ := fs.Glob(sources, "*.cu*")
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		out[n] = b
	}
	return out
}

// Entry is one kernel: an extern "C" __global__ function of a .cu file.
type Entry struct {
	Name, File string
}

var entryRE = regexp.MustCompile(`(?m)^\s*extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(`)

// EntriesOf lists the kernels a CUDA source defines, in source order.
func EntriesOf(file string, src []byte) []Entry {
	var out []Entry
	for _, m := range entryRE.FindAllSubmatch(src, -1) {
		out = append(out, Entry{Name: string(m[1]), File: file})
	}
	return out
}

// Entries lists every kernel of the .cu files, by file and then in
// source order.
func Entries() []Entry {
	src := Sources()
	var files []string
	for n := range src {
		if len(n) > 3 && n[len(n)-3:] == ".cu" {
			files = append(files, n)
		}
	}
	sort.Strings(files)
	var out []Entry
	for _, f := range files {
		out = append(out, EntriesOf(f, src[f])...)
	}
	return out
}
