//go:build unix

package cpu

import "syscall"

// mapAnon reserves n bytes of zeroed memory outside the Go heap: the garbage
// collector neither scans nor frees it, and unmapAnon gives it back to the
// system at once (resident memory drops).
func mapAnon(n int64) ([]byte, error) {
	return syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

func unmapAnon(b []byte) error { return syscall.Munmap(b) }
