package isa

import "strings"

// feature names one fact the way GODEBUG's cpu options name it.
type feature struct {
	name string
	has  *bool
}

// features lists the facts GODEBUG may turn off, under the names
// golang.org/x/sys/cpu gives them ("sha" is the Go runtime's own name; the
// runtime then also stops crypto/sha256 from using the SHA extensions).
func features() []feature {
	return []feature{
		{"avx2", &HasAVX2},
		{"fma", &hasFMA},
		{"avx512f", &HasAVX512F},
		{"avx512bw", &hasAVX512BW},
		{"avx512bf16", &hasAVX512BF16},
		{"sha", &HasSHA},
		{"ssse3", &HasSSSE3},
		{"sse41", &HasSSE41},
		{"sse42", &HasSSE42},
	}
}

// disable applies the cpu.<name>=on|off fields of a GODEBUG value to fs,
// as x/sys/cpu does: the last field naming a feature (or "all") wins, and
// off clears the fact while on cannot set one the hardware lacks. Other
// fields, and names this package does not track, are left to the runtime
// and to x/sys/cpu, which report any they do not know.
func disable(godebug string, fs []feature) {
	on := make([]int8, len(fs)) // 0 unsaid, 1 on, -1 off
	for _, field := range strings.Split(godebug, ",") {
		key, value, ok := strings.Cut(field, "=")
		name, isCPU := strings.CutPrefix(key, "cpu.")
		if !ok || !isCPU || (value != "on" && value != "off") {
			continue
		}
		v := int8(1)
		if value == "off" {
			v = -1
		}
		for i, f := range fs {
			if name == "all" || name == f.name {
				on[i] = v
			}
		}
	}
	for i, f := range fs {
		if on[i] < 0 {
			*f.has = false
		}
	}
}
