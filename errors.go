package ferry

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"ferry/device"
)

// Error is what the math API panics with for a mistake in how it was
// called: shapes that do not agree, a tensor used after Release, tensors on
// two devices. Step and Catch turn it back into an error. It is never used
// for what data or hardware can cause; those are errors returned by the
// functions that meet them (Backward, optimizers, I/O), or, for an
// allocation inside an op, a *device.OutOfMemoryError carried the same way.
type Error struct {
	Op  string // the operation that found the mistake: "matmul", "backward"
	Msg string
	Err error // an underlying error, if any
}

func (e *Error) Error() string {
	s := "ferry: " + e.Op + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(op, format string, args ...any) *Error {
	return &Error{Op: op, Msg: fmt.Sprintf(format, args...)}
}

// panicf panics with an *Error.
func panicf(op, format string, args ...any) { panic(errorf(op, format, args...)) }

// check panics with err wrapped as an *Error when err is not nil. An
// out-of-memory error keeps its type so callers can errors.As it.
func check(op string, err error) {
	if err != nil {
		panic(&Error{Op: op, Msg: "device error", Err: err})
	}
}

// Catch runs f and turns a panic carrying an *Error back into a returned
// error; any other panic goes on. It is the step boundary of the math API:
// Step uses it, and so can code that runs ops outside a step.
func Catch(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			var fe *Error
			if !ok || !errors.As(e, &fe) {
				panic(r)
			}
			err = e
		}
	}()
	return f()
}

// IsOutOfMemory reports whether err is, or wraps, a device's out-of-memory
// error, and returns it.
func IsOutOfMemory(err error) (*device.OutOfMemoryError, bool) {
	var oom *device.OutOfMemoryError
	ok := errors.As(err, &oom)
	return oom, ok
}

// stackTrace is a few return addresses, kept inline so that recording one
// allocates nothing.
type stackTrace [6]uintptr

func captureStack(skip int) (st stackTrace) {
	runtime.Callers(skip+2, st[:])
	return st
}

// String names the innermost frame outside package ferry itself, and the
// first frame outside ferry's packages when that is a different one:
// "nn/nn.go:213 (nn.(*Sequential).Forward), from main.go:12".
func (st stackTrace) String() string {
	n := 0
	for n < len(st) && st[n] != 0 {
		n++
	}
	frames := runtime.CallersFrames(st[:n])
	var first, user string
	for {
		f, more := frames.Next()
		site := fmt.Sprintf("%s:%d", shortFile(f.File), f.Line)
		if first == "" && !strings.HasPrefix(f.Function, "ferry.") {
			first = site + " (" + strings.TrimPrefix(f.Function, "ferry/") + ")"
		}
		if !strings.HasPrefix(f.Function, "ferry") {
			user = site
			break
		}
		if !more {
			break
		}
	}
	switch {
	case first == "" && user == "":
		return "an unknown place"
	case first == "":
		return user
	case user == "" || strings.HasPrefix(first, user):
		return first
	default:
		return first + ", from " + user
	}
}

func shortFile(path string) string {
	slashes := 0
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			slashes++
			if slashes == 2 {
				return path[i+1:]
			}
		}
	}
	return path
}
