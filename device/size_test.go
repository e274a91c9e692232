package device

import (
	"errors"
	"math"
	"testing"
)

func TestShapeBytes(t *testing.T) {
	for _, c := range []struct {
		shape []int
		size  int
		numel int
		bytes int64
		err   error // nil: fine; ErrTooLarge; errAny: some other error
	}{
		{nil, 4, 1, 4, nil},
		{[]int{3, 5}, 4, 15, 60, nil},
		{[]int{0, math.MaxInt}, 4, 0, 0, nil},
		{[]int{math.MaxInt, math.MaxInt, 0}, 4, 0, 0, nil},
		{[]int{math.MaxInt64, 1024}, 4, 0, 0, ErrTooLarge},
		{[]int{1 << 31, 1 << 31, 4}, 4, 0, 0, ErrTooLarge}, // 2^64 elements: wraps to 0 unchecked
		{[]int{1 << 59}, 4, 0, 0, ErrTooLarge},             // fits as elements, not as bytes
		{[]int{1 << 58}, 2, 1 << 58, 1 << 59, nil},
		{[]int{1<<60 + 1}, 1, 0, 0, ErrTooLarge},
		{[]int{1 << 60}, 1, 1 << 60, 1 << 60, nil},
		{[]int{4, -5}, 4, 0, 0, errAny},
		{[]int{math.MaxInt, -1}, 4, 0, 0, errAny},
	} {
		n, b, err := ShapeBytes(c.shape, c.size)
		switch {
		case c.err == nil && err != nil:
			t.Errorf("%v×%d: unexpected error %v", c.shape, c.size, err)
		case c.err == ErrTooLarge && !errors.Is(err, ErrTooLarge):
			t.Errorf("%v×%d: got %v, want ErrTooLarge", c.shape, c.size, err)
		case c.err == errAny && (err == nil || errors.Is(err, ErrTooLarge)):
			t.Errorf("%v×%d: got %v, want a negative-dimension error", c.shape, c.size, err)
		case n != c.numel || b != c.bytes:
			t.Errorf("%v×%d: got %d elements, %d bytes; want %d, %d", c.shape, c.size, n, b, c.numel, c.bytes)
		}
	}
}

var errAny = errors.New("any")
