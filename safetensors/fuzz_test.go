package safetensors

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzRead feeds Parse arbitrary bytes: it must never panic, and a file it
// accepts must survive Encode and Parse unchanged. Seeds are in
// testdata/fuzz/FuzzRead (a good file, a PyTorch-style file, and damaged
// ones); see docs/fuzzing.md for a longer run.
func FuzzRead(f *testing.F) {
	f.Add(encode(f, sample(), map[string]string{"format": "pt"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("fuzz", b)
		if err != nil {
			if file != nil {
				t.Fatal("a file and an error")
			}
			return
		}
		var buf bytes.Buffer
		if err := Encode(&buf, file.Tensors, file.Metadata); err != nil {
			t.Fatalf("accepted file does not encode: %v", err)
		}
		again, err := Parse("again", buf.Bytes())
		if err != nil {
			t.Fatalf("re-encoded file refused: %v", err)
		}
		sameMeta := len(again.Metadata) == 0 && len(file.Metadata) == 0 || reflect.DeepEqual(again.Metadata, file.Metadata)
		if len(again.Tensors) != len(file.Tensors) || !sameMeta {
			t.Fatalf("round trip changed the file: %+v vs %+v", file, again)
		}
		for _, x := range file.Tensors {
			y := again.Tensor(x.Name)
			if y == nil || y.DType != x.DType || len(y.Shape) != len(x.Shape) || !bytes.Equal(y.Data, x.Data) {
				t.Fatalf("tensor %q changed in the round trip", x.Name)
			}
			if x.DType == F32 || x.DType == F16 || x.DType == BF16 || x.DType == F64 {
				if v, err := x.Float32s(); err != nil || len(v) != x.Numel() {
					t.Fatalf("%q: %d values, %v", x.Name, len(v), err)
				}
			}
		}
	})
}
