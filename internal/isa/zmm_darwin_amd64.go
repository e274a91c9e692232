//go:build amd64 && gc

package isa

import "syscall"

// osSavesZMM reports whether macOS lets programs use AVX-512, as
// golang.org/x/sys/cpu decides it there: macOS
// turns the ZMM state on in XCR0 only once a thread first uses it, so XCR0
// cannot tell; the kernel's hw.optional.avx512f says whether it will, and
// kernels before 21.3.0 (macOS 12.2) may corrupt the opmask registers on
// signal return, so AVX-512 counts only from that release on. (syscall is
// already linked in by os.)
func osSavesZMM(uint32) bool {
	if v, err := syscall.SysctlUint32("hw.optional.avx512f"); err != nil || v == 0 {
		return false
	}
	release, err := syscall.Sysctl("kern.osrelease")
	return err == nil && releaseAtLeast(release, 21, 3, 0)
}

// releaseAtLeast reports whether a "major.minor.patch" release is at least
// the one given; anything else is not.
func releaseAtLeast(release string, major, minor, patch int) bool {
	var v [3]int
	i := 0
	for _, c := range []byte(release) {
		switch {
		case c >= '0' && c <= '9':
			v[i] = 10*v[i] + int(c-'0')
		case c == '.' && i < 2:
			i++
		default:
			return false
		}
	}
	if i != 2 {
		return false
	}
	if v[0] != major {
		return v[0] > major
	}
	if v[1] != minor {
		return v[1] > minor
	}
	return v[2] >= patch
}
