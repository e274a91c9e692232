//go:build amd64 || arm64

package goid

// Supported reports whether Current tells goroutines apart on this
// architecture.
const Supported = true

func current() uintptr
