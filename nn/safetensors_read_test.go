package nn_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"ferry/nn"
	"ferry/safetensors"
)

// A file with NaN or infinite weights, its checksums recomputed (a
// crafted file, or a diverged run's), is refused under RequireFinite with
// every bad tensor named, in float32 and in a bfloat16 file converted on
// load; the model is left untouched. Without the option it loads.
func TestLoadRequireFiniteRefusesNaNWeights(t *testing.T) {
	dev := cpuDev(t)
	for _, c := range []struct {
		name  string
		dtype safetensors.DType
		bad   float32
	}{{"f32 NaN", safetensors.F32, float32(math.NaN())}, {"f32 +Inf", safetensors.F32, float32(math.Inf(1))}, {"bf16 -Inf", safetensors.BF16, float32(math.Inf(-1))}} {
		path := rewrite(t, stDir+"mlp.safetensors", func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i, x := range ts {
				v, _ := x.Float32s()
				if x.Name == "2.weight" {
					v[3] = c.bad
				}
				if c.dtype == safetensors.BF16 {
					d := make([]byte, 2*len(v))
					for k, f := range v {
						binary.LittleEndian.PutUint16(d[2*k:], uint16(math.Float32bits(f)>>16))
					}
					ts[i] = safetensors.Tensor{Name: x.Name, DType: safetensors.BF16, Shape: x.Shape, Data: d}
					continue
				}
				d := make([]byte, 4*len(v))
				for k, f := range v {
					binary.LittleEndian.PutUint32(d[4*k:], math.Float32bits(f))
				}
				ts[i] = safetensors.Tensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: d}
			}
			return ts
		})
		m := newMLP(t, dev, 3)
		before := snapshot(m)
		err := nn.LoadSafetensorsWith(path, m, nn.LoadOptions{ConvertFloats: true, RequireFinite: true})
		if !errors.Is(err, nn.ErrNonFinite) || !strings.Contains(err.Error(), "2.weight (1 of 64 values") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want ErrNonFinite naming the file and 2.weight", c.name, err)
		}
		if !reflect.DeepEqual(before, snapshot(m)) {
			t.Errorf("%s: the refused file changed the model", c.name)
		}
		if err := nn.LoadSafetensorsWith(path, m, nn.LoadOptions{ConvertFloats: true}); err != nil {
			t.Errorf("%s without RequireFinite: %v", c.name, err)
		}
	}
}

// A load whose context is done stops with the context's cause and leaves
// the model as it was.
func TestLoadSafetensorsContextStops(t *testing.T) {
	dev := cpuDev(t)
	m := newMLP(t, dev, 5)
	before := snapshot(m)
	why := errors.New("interrupted by a signal")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(why)
	err := nn.LoadSafetensorsContext(ctx, []string{stDir + "mlp.safetensors"}, m, nn.LoadOptions{})
	if !errors.Is(err, why) {
		t.Fatalf("got %v, want the cause", err)
	}
	if _, _, err := nn.LoadTensorsContext(ctx, stDir+"mlp.safetensors", dev); !errors.Is(err, why) {
		t.Fatalf("LoadTensorsContext: %v", err)
	}
	if !reflect.DeepEqual(before, snapshot(m)) {
		t.Error("the model changed")
	}
}
