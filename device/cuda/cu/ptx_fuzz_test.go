package cu

import "testing"

func FuzzParsePTX(f *testing.F) {
	f.Add([]byte(".visible .entry k1(\n\t.param .u64 k1_param_0,\n\t.param .f32 k1_param_1\n)\n{\n}\n"))
	f.Add([]byte(".entry k2()\n{\n}\n.visible .entry"))
	f.Add([]byte(".param .align 8 .b8 x[264]"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParsePTX(b)
		if err != nil {
			return
		}
		for _, e := range es {
			for _, n := range e.Params {
				if n < 0 {
					t.Fatalf("%s: parameter of %d bytes", e.Name, n)
				}
			}
		}
	})
}
