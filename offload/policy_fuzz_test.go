package offload

import (
	"testing"

	"ferry"
)

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"default":"keep"}`,
		`{"version":1,"default":"disk","layers":{"layers.0":"host"},"rules":[{"module":"layers.1","slot":-1,"placement":"host"}]}`,
		`{"version":2}`, `{"version":1,"default":"nowhere"}`, `{"version":1,"default":7}`, `[]`, `null`, ``, `{"version":1,"rules":[{"slot":99999999999999999999}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			return
		}
		// A parsed policy places and checks without panicking.
		_ = p.Place(ferry.SaveInfo{Module: "layers.0", Op: "linear"}, nil)
		_ = p.Check([]string{"layers.0", "layers.1"}, false)
		_ = p.Default.String()
	})
}
