package ferry

import "testing"

// BenchmarkTapeOwnerCheck is what the goroutine owner check adds to each
// use of a tape (an op makes about three: tapeOf, and Release of its
// output at Close): about 2.6 ns on the 2-core Zen 5 this was written on.
func BenchmarkTapeOwnerCheck(b *testing.B) {
	tp := NewTape()
	tp.checkOwner("bench")
	for b.Loop() {
		tp.checkOwner("bench")
	}
}
