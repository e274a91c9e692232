//go:build amd64 && gc

package isa

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// The facts agree with golang.org/x/sys/cpu, which the package replaced,
// and AVX2, AVX512 and AVX512BF16 are what they were when it derived them
// from x/sys/cpu (before FERRY_CPU lowers them). Both read GODEBUG alike.
func TestFactsMatchXSysCPU(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, sys bool
	}{
		{"AVX2", HasAVX2, cpu.X86.HasAVX2},
		{"FMA", hasFMA, cpu.X86.HasFMA},
		{"AVX512F", HasAVX512F, cpu.X86.HasAVX512F},
		{"AVX512BW", hasAVX512BW, cpu.X86.HasAVX512BW},
		{"AVX512BF16", hasAVX512BF16, cpu.X86.HasAVX512BF16},
		{"SSSE3", HasSSSE3, cpu.X86.HasSSSE3},
		{"SSE4.1", HasSSE41, cpu.X86.HasSSE41},
		{"SSE4.2", HasSSE42, cpu.X86.HasSSE42},
	} {
		if c.ours != c.sys {
			t.Errorf("%s: isa says %v, x/sys/cpu %v", c.name, c.ours, c.sys)
		}
	}
	if os.Getenv("FERRY_CPU") == "" {
		old2 := cpu.X86.HasAVX2 && cpu.X86.HasFMA
		old512 := old2 && cpu.X86.HasAVX512F
		oldBF16 := old512 && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16
		if AVX2 != old2 || AVX512 != old512 || AVX512BF16 != oldBF16 {
			t.Errorf("AVX2, AVX512, AVX512BF16 = %v, %v, %v; x/sys/cpu gives %v, %v, %v",
				AVX2, AVX512, AVX512BF16, old2, old512, oldBF16)
		}
	}
	t.Logf("avx2 %v fma %v avx512f %v avx512bw %v avx512bf16 %v sha %v ssse3 %v sse4.1 %v sse4.2 %v",
		HasAVX2, hasFMA, HasAVX512F, hasAVX512BW, hasAVX512BF16, HasSHA, HasSSSE3, HasSSE41, HasSSE42)
}

// x/sys/cpu has no SHA fact on x86; Linux's /proc/cpuinfo lists the same
// CPUID bit as the flag sha_ni.
func TestSHAMatchesCPUInfo(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo:", err)
	}
	if g := os.Getenv("GODEBUG"); strings.Contains(g, "cpu.sha=") || strings.Contains(g, "cpu.all=") {
		t.Skip("GODEBUG sets cpu.sha or cpu.all")
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, _ := strings.Cut(line, ":")
		if strings.TrimSpace(name) != "flags" {
			continue
		}
		cpuinfo := false
		for _, f := range strings.Fields(value) {
			cpuinfo = cpuinfo || f == "sha_ni"
		}
		if HasSHA != cpuinfo {
			t.Errorf("HasSHA = %v; /proc/cpuinfo's sha_ni: %v", HasSHA, cpuinfo)
		}
		return
	}
	t.Skip("no flags line in /proc/cpuinfo")
}
