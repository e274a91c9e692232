// Package goid tells goroutines apart, cheaply enough to check on every op:
// Current returns an identity of the calling goroutine in about a
// nanosecond, without the allocation and parsing of runtime.Stack.
//
// The identity is the address of the runtime's descriptor of the goroutine.
// Two goroutines alive at the same time never share it; a goroutine that
// has exited may pass its descriptor on to a new one. So an owner check
// built on it never reports a false mismatch, and may miss a goroutine that
// started after the owner exited.
package goid

// Current returns the calling goroutine's identity, or 0 where Supported is
// false.
func Current() uintptr { return current() }
