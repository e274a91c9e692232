package dist

import (
	"fmt"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/nn"
)

// On a device that holds no values the buckets share one buffer, as large
// as the largest bucket; elsewhere each has its own.
func TestBucketsShareABufferOnlyWithoutValues(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	var params []*ferry.Tensor
	for _, n := range []int{1000, 3000, 2000} {
		params = append(params, nn.NewParameter(ferry.Full(dev, 0, n), fmt.Sprint("p", n)))
	}
	r, err := NewGradientReducer(Pretend(0, 2), params, ReducerOptions{BucketBytes: 4 * 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.buckets) != 3 || &r.buckets[0].buf[0] != &r.buckets[1].buf[0] || cap(r.buckets[0].buf) != 3000 {
		t.Errorf("meta: %d buckets, sharing %v, capacity %d", len(r.buckets), &r.buckets[0].buf[0] == &r.buckets[1].buf[0], cap(r.buckets[0].buf))
	}
	b := newBuffers(nil)
	if x, y := b.get(10), b.get(10); b.shared || &x[0] == &y[0] {
		t.Error("without parameters on a value-less device, buffers are shared")
	}
}
