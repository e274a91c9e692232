package safetensors_test

import (
	"fmt"
	"os"
	"path/filepath"

	"ferry/safetensors"
)

func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "weights.safetensors")

	err := safetensors.WriteFile(path, []safetensors.Tensor{
		safetensors.FromFloat32s("0.weight", []float32{1, 2, 3, 4, 5, 6}, 2, 3),
		safetensors.FromFloat32s("0.bias", []float32{0.5, -0.5}, 2),
	}, map[string]string{"format": "pt"})
	if err != nil {
		fmt.Println(err)
		return
	}

	f, err := safetensors.ReadFile(path, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range f.Tensors {
		v, _ := t.Float32s()
		fmt.Println(t.Name, t.DType, t.Shape, v)
	}
	fmt.Println("checksums verified:", f.Checksummed, "metadata:", f.Metadata)
	// Output:
	// 0.bias F32 [2] [0.5 -0.5]
	// 0.weight F32 [2 3] [1 2 3 4 5 6]
	// checksums verified: true metadata: map[format:pt]
}
