package device

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxBytes is the largest allocation any device is asked for: 2^60 bytes
// (1 EiB), beyond the memory of any machine. Sizes are checked against it
// once, when they are computed (ShapeBytes) and when they reach an
// allocator, so that rounding a size up to a block or a segment can never
// overflow an int64.
const MaxBytes int64 = 1 << 60

// ErrTooLarge is wrapped by the errors of ShapeBytes and Allocator.Alloc
// for a size that overflows, or exceeds MaxBytes.
var ErrTooLarge = errors.New("size exceeds what any device can hold")

// ShapeBytes returns the number of elements of shape and their size in
// bytes at elemSize bytes each. It is the one place where ferry multiplies
// dimensions for memory: a negative dimension, or a product that overflows
// or exceeds MaxBytes, is an error wrapping ErrTooLarge (the negative
// dimension aside), never a wrapped-around number. It does not retain
// shape, so a caller's variadic shape stays on its stack.
func ShapeBytes(shape []int, elemSize int) (numel int, bytes int64, err error) {
	var n uint64 = 1
	overflow := false
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("shape %v: negative dimension %d", append([]int(nil), shape...), d) // a copy: shape must not escape
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > uint64(MaxBytes) {
			overflow = true // keep going: a later 0 makes the product 0, and a later negative dimension is the better error
			n = uint64(MaxBytes) + 1
			continue
		}
		n = lo
	}
	for _, d := range shape {
		if d == 0 {
			return 0, 0, nil
		}
	}
	hi, b := bits.Mul64(n, uint64(elemSize))
	if overflow || hi != 0 || b > uint64(MaxBytes) {
		return 0, 0, fmt.Errorf("shape %v of %d-byte elements: %w (at most %s)", append([]int(nil), shape...), elemSize, ErrTooLarge, FormatBytes(MaxBytes))
	}
	return int(n), int64(b), nil
}
