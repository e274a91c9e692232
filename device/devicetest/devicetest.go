// Package devicetest is a conformance suite for ferry devices, in the manner
// of testing/fstest.TestFS: a driver's own tests call Run with a function
// that opens a fresh device, and the suite checks everything package device
// promises on that device.
//
//	func TestConformance(t *testing.T) {
//		devicetest.Run(t, func(t *testing.T, opts device.Options) device.Device {
//			d, err := cpu.New(opts)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return d
//		}, devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}})
//	}
//
// It covers the allocator as seen through the device (statistics, capacity
// and out-of-memory errors, RecordStream, poisoning), streams and events,
// copies between the device and its host, every Kernels method against a
// reference written here, the optional kernel families the device
// implements, bfloat16 conversions and products where the device has
// them (bit for bit against device.ToBFloat16 and FromBFloat16), and, given Caps.Reference, every required kernel against
// another device (the CPU device) on large random inputs. It works on
// blocks, views and spans directly: it tests devices, not tensors.
package devicetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"ferry/device"
)

// Caps says what the device under test can do; the suite skips what it
// cannot.
type Caps struct {
	// HasData is true when device memory holds values. The meta device
	// has shapes and no values: with HasData false the suite still runs
	// every kernel and every copy (they must succeed and allocate as a
	// real device does) but checks no values.
	HasData bool
	// SlowCopy are Options.Params under which every copy on a side stream
	// is slow enough (tens of milliseconds) for a test to observe it in
	// flight; the CPU device: {"copy_delay": "50ms"}. Nil skips the tests
	// that need one.
	SlowCopy map[string]string
	// Tol is the relative tolerance of kernel results against the
	// reference (absolute below 1); 0 means 1e-5. A real GPU: 1e-4. Tests
	// with a looser tolerance of their own keep theirs.
	Tol float64
	// GemmTol is the tolerance of matrix products; 0 means Tol. A device
	// in TF32 mode: 1e-2.
	GemmTol float64
	// Reference opens a device with data that the Compare tests run every
	// required kernel against on the same random inputs (the CPU device);
	// the suite closes it. Nil skips those tests.
	Reference func(t *testing.T) device.Device
	// Large makes the Compare tests and the large side-stream copy use
	// shapes big enough to span many thread blocks and split reductions
	// (hundreds of MiB in all): for a real GPU.
	Large bool
	// Seed is the Compare tests' random seed; 0 takes one from the clock
	// (each test logs the seed it used).
	Seed uint64
}

// Run runs the conformance suite. open must return a fresh device opened
// with opts, or fail t (t.Skip if the device is unavailable); the suite
// closes every device it opens and checks that Close succeeds.
func Run(t *testing.T, open func(t *testing.T, opts device.Options) device.Device, caps Caps) {
	runGroups(t, open, caps, []string{"Memory", "Streams", "Kernels"}, nil)
}

// gemmTol is the tolerance of matrix products.
func (e *env) gemmTol() float64 {
	if e.caps.GemmTol != 0 {
		return e.caps.GemmTol
	}
	return e.caps.Tol
}

// runGroups runs the named groups of tests, or, given only, the tests of
// those groups named in it.
func runGroups(t *testing.T, open func(t *testing.T, opts device.Options) device.Device, caps Caps, groups, only []string) {
	if caps.Tol == 0 {
		caps.Tol = 1e-5
	}
	s := &suite{open: open, caps: caps}
	tests := map[string][]test{"Memory": memoryTests, "Streams": streamTests, "Kernels": kernelTests}
	for _, group := range groups {
		t.Run(group, func(t *testing.T) {
			for _, tc := range tests[group] {
				if len(only) > 0 && !slices.Contains(only, tc.name) {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					if tc.needsData && !caps.HasData {
						t.Skip("the device holds no values (Caps.HasData is false)")
					}
					if tc.needsSlowCopy && caps.SlowCopy == nil {
						t.Skip("no way to make a copy slow (Caps.SlowCopy is nil)")
					}
					if tc.needsReference && (caps.Reference == nil || !caps.HasData) {
						t.Skip("no reference device to compare with (Caps.Reference is nil)")
					}
					tc.fn(s.env(t, device.Options{}))
				})
			}
		})
	}
}

type test struct {
	name           string
	fn             func(e *env)
	needsData      bool
	needsSlowCopy  bool
	needsReference bool
}

type suite struct {
	open func(t *testing.T, opts device.Options) device.Device
	caps Caps
}

// env is one test's device and helpers.
type env struct {
	*testing.T
	s    *suite
	caps Caps
	dev  device.Device
	k    device.Kernels
}

func (s *suite) env(t *testing.T, opts device.Options) *env {
	e := &env{T: t, s: s, caps: s.caps}
	e.dev = e.openDevice(opts)
	e.k = e.dev.Kernels()
	if device.HasData(e.dev) != s.caps.HasData {
		t.Fatalf("device %s: device.HasData says %v, Caps.HasData says %v", e.dev.Name(), device.HasData(e.dev), s.caps.HasData)
	}
	return e
}

// openDevice opens a device for this test and closes it when the test ends.
func (e *env) openDevice(opts device.Options) device.Device {
	e.Helper()
	d := e.s.open(e.T, opts)
	if d == nil {
		e.Fatalf("open returned a nil device")
	}
	e.Cleanup(func() {
		if err := d.Close(); err != nil {
			e.Errorf("Close %s: %v", d.Name(), err)
		}
	})
	return d
}

// reopen replaces the test's device with one opened with opts.
func (e *env) reopen(opts device.Options) {
	e.Helper()
	e.dev = e.openDevice(opts)
	e.k = e.dev.Kernels()
}

func (e *env) slowOpts() device.Options { return device.Options{Params: e.caps.SlowCopy} }

func (e *env) ok(err error, what string, args ...any) {
	e.Helper()
	if err != nil {
		e.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// alloc allocates n bytes on d (the test's device or its host).
func (e *env) alloc(d device.Device, n int64, cat device.Category) *device.Block {
	e.Helper()
	b, err := d.Allocator().Alloc(n, cat)
	e.ok(err, "%s: Alloc(%d)", d.Name(), n)
	return b
}

// tensor allocates a contiguous view of shape on the device holding vals
// (when the device has data; vals may be nil for an uninitialised one).
func (e *env) tensor(shape []int, vals []float32) device.View {
	e.Helper()
	return e.tensorOn(e.dev, shape, vals)
}

func (e *env) tensorOn(d device.Device, shape []int, vals []float32) device.View {
	e.Helper()
	n := device.Numel(shape)
	b := e.alloc(d, int64(max(n, 1)*4), device.Activation)
	v := device.View{Block: b, Shape: shape, Strides: device.Contiguous(shape)}
	if vals != nil {
		if len(vals) != n {
			e.Fatalf("tensor of shape %v given %d values", shape, len(vals))
		}
		e.upload(d, v, vals)
	}
	return v
}

// storage allocates n elements holding vals and returns a view of them
// with the given shape, strides and element offset (for non-contiguous
// and broadcast inputs).
func (e *env) storage(vals []float32, off int, shape, strides []int) device.View {
	e.Helper()
	v := e.tensor([]int{len(vals)}, vals)
	return device.View{Block: v.Block, Off: off, Shape: shape, Strides: strides}
}

func (e *env) upload(d device.Device, v device.View, vals []float32) {
	e.Helper()
	if !e.caps.HasData {
		return
	}
	e.ok(d.Kernels().Upload(v, floatBytes(vals)), "Upload")
}

// read downloads the n elements that start at v's offset (n = v.Numel()
// when omitted). It returns nil on a device without data.
func (e *env) read(v device.View, n ...int) []float32 {
	e.Helper()
	return e.readOn(e.dev, v, n...)
}

func (e *env) readOn(d device.Device, v device.View, n ...int) []float32 {
	e.Helper()
	if !e.caps.HasData {
		return nil
	}
	m := v.Numel()
	if len(n) > 0 {
		m = n[0]
	}
	buf := make([]byte, 4*m)
	e.ok(d.Kernels().Download(buf, v), "Download")
	return bytesFloat(buf)
}

// near checks got against want to the suite's tolerance; NaNs must match
// NaNs and infinities must match exactly. Nothing is checked without data.
// nearTol checks to tol, or to Caps.Tol where that is looser.
func (e *env) near(what string, got []float32, want []float64) {
	e.Helper()
	e.nearTol(what, got, want, e.caps.Tol)
}

func (e *env) nearTol(what string, got []float32, want []float64, tol float64) {
	e.Helper()
	if !e.caps.HasData {
		return
	}
	tol = max(tol, e.caps.Tol)
	if len(got) != len(want) {
		e.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := float64(got[i]), want[i]
		if math.IsNaN(w) || math.IsInf(w, 0) {
			if !(math.IsNaN(w) && math.IsNaN(g)) && g != w {
				bad++
				e.Errorf("%s[%d] = %v, want %v", what, i, g, w)
			}
		} else if math.IsNaN(g) || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			bad++
			e.Errorf("%s[%d] = %v, want %v", what, i, g, w)
		}
		if bad >= 5 {
			e.Fatalf("%s: giving up after %d wrong values", what, bad)
		}
	}
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesFloat(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:]))
	}
	return v
}

func f64(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

func fill(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// seq gives n deterministic values spread over [lo, hi), in an order that
// makes misplaced elements show.
func seq(n int, lo, hi float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		f := float32((i*7919)%1009) / 1009
		s[i] = lo + (hi-lo)*f
	}
	return s
}

// flat is a one-dimensional view of the first n elements of b.
func flat(b *device.Block, n int) device.View {
	return device.View{Block: b, Shape: []int{n}, Strides: []int{1}}
}

// overlaps reports whether two blocks share bytes. Segments a driver
// represents by a type that cannot be compared are taken to differ.
func overlaps(a, b *device.Block) bool {
	sa, sb := a.Segment(), b.Segment()
	if t := reflect.TypeOf(sa); t == nil || !t.Comparable() || sa != sb {
		return false
	}
	return a.Offset() < b.Offset()+b.Size() && b.Offset() < a.Offset()+a.Size()
}
