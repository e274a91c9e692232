package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"ferry/device"
	"ferry/device/meta"
)

func FuzzLoadProfile(f *testing.F) {
	b, _ := json.Marshal(builtin["h200-pcie5"])
	f.Add(b)
	f.Add([]byte(`{"MatmulFLOPS":1e400}`))
	f.Add([]byte(`{"matmul_flops":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		prof, err := LoadProfile(p)
		if err != nil {
			return
		}
		// A profile that loads is one the meta device can use.
		d := meta.New(device.Options{}, prof)
		d.Close()
	})
}
