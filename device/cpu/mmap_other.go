//go:build !unix

package cpu

// mapAnon falls back to the Go heap where there is no mmap. The allocator
// still decides when memory is reused; the collector frees the slice only
// after unmapAnon drops the last reference.
func mapAnon(n int64) ([]byte, error) { return make([]byte, n), nil }

func unmapAnon(b []byte) error { return nil }
