package kernels

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// The record catches what the issue that brought it was about: an edit of
// a .cu file, or of a header it includes (ops.cuh gained an op), with the
// old PTX still committed. Each case changes one byte of a copy of this
// directory's files and checks which PTX files are reported stale.
func TestCheckPTXSum(t *testing.T) {
	files, err := ReadSources(".")
	if err != nil {
		t.Fatal(err)
	}
	const command = "nvcc the same way"
	record := PTXSum(files, command)
	if p := CheckPTXSum(files, command, record); len(p) > 0 {
		t.Fatalf("the record of the files themselves: %q", p)
	}
	including := func(h string) []string { // the PTX files whose sources include header h
		var out []string
		for n := range files {
			if strings.HasSuffix(n, ".cu") && slices.Contains(Includes(files, n), h) {
				out = append(out, strings.TrimSuffix(n, ".cu")+".ptx")
			}
		}
		slices.Sort(out)
		return out
	}
	sources := 0
	for n := range files {
		if strings.HasSuffix(n, ".cu") {
			sources++
		}
	}
	if got := including("common.cuh"); len(got) != sources {
		t.Errorf("common.cuh is included by %v, not by each of the %d sources", got, sources)
	}
	if got := including("ops.cuh"); !slices.Contains(got, "elementwise.ptx") {
		t.Errorf("ops.cuh is included by %v, not by elementwise.cu", got)
	}
	for _, tc := range []struct {
		name  string
		edit  func(f map[string][]byte)
		stale []string // the PTX files reported
		say   string   // in every problem
	}{
		{"a .cu file", func(f map[string][]byte) { f["reduce.cu"] = flip(f["reduce.cu"]) }, []string{"reduce.ptx"}, "stale: reduce.cu changed"},
		{"ops.cuh", func(f map[string][]byte) { f["ops.cuh"] = flip(f["ops.cuh"]) }, including("ops.cuh"), "ops.cuh changed"},
		{"common.cuh", func(f map[string][]byte) { f["common.cuh"] = flip(f["common.cuh"]) }, including("common.cuh"), "common.cuh changed"},
		{"a .ptx file", func(f map[string][]byte) { f["gemm.ptx"] = flip(f["gemm.ptx"]) }, []string{"gemm.ptx"}, "not the PTX"},
		{"a new source", func(f map[string][]byte) { f["new.cu"], f["new.ptx"] = []byte("x"), []byte("y") }, []string{"new.cu"}, "not in ptx.sum"},
		{"a new source without PTX", func(f map[string][]byte) { f["new.cu"] = []byte("x") }, []string{"new.cu has no new.ptx"}, "go generate"},
	} {
		f := maps.Clone(files)
		tc.edit(f)
		problems := CheckPTXSum(f, command, record)
		if len(problems) != len(tc.stale) {
			t.Errorf("%s changed: %d problems %q, want one for each of %v", tc.name, len(problems), problems, tc.stale)
			continue
		}
		for i, p := range problems {
			if !strings.HasPrefix(p, tc.stale[i]) || !strings.Contains(p, tc.say) || !strings.Contains(p, "go generate ./device/cuda") {
				t.Errorf("%s changed: problem %q, want it about %s, saying %q and what to run", tc.name, p, tc.stale[i], tc.say)
			}
		}
	}
	if p := CheckPTXSum(files, "nvcc another way", record); len(p) != 1 || !strings.Contains(p[0], "compiled with") {
		t.Errorf("another command: %q", p)
	}
}

// flip changes the last byte of b (a copy).
func flip(b []byte) []byte {
	c := slices.Clone(b)
	c[len(c)-1] ^= 1
	return c
}
