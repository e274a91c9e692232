package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// raw builds a file from a header string and a data buffer, without
// any of Encode's checks.
func raw(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func sample() []Tensor {
	return []Tensor{
		FromFloat32s("w", []float32{1, 2, 3, 4, 5, 6}, 2, 3),
		FromInt32s("idx", []int32{-1, 7}, 2),
		{Name: "h", DType: F16, Shape: []int{2}, Data: []byte{0x00, 0x3c, 0x00, 0xc0}}, // 1, -2
		{Name: "scalar", DType: F64, Shape: []int{}, Data: binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.5))},
		{Name: "empty", DType: F32, Shape: []int{0, 3}, Data: nil},
	}
}

func encode(t testing.TB, ts []Tensor, md map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, ts, md); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b := encode(t, sample(), map[string]string{"format": "pt"})
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	f, err := Parse("x", b)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Checksummed || !reflect.DeepEqual(f.Metadata, map[string]string{"format": "pt"}) {
		t.Errorf("checksummed %v, metadata %v", f.Checksummed, f.Metadata)
	}
	// Decreasing element size, then by name; each tensor aligned.
	var names []string
	for _, x := range f.Tensors {
		names = append(names, x.Name)
	}
	if want := []string{"scalar", "empty", "idx", "w", "h"}; !reflect.DeepEqual(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
	for _, want := range sample() {
		got := f.Tensor(want.Name)
		if got == nil || got.DType != want.DType || !reflect.DeepEqual(append([]int{}, got.Shape...), append([]int{}, want.Shape...)) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: got %+v, want %+v", want.Name, got, want)
		}
	}
	if v, err := f.Tensor("w").Float32s(); err != nil || !reflect.DeepEqual(v, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("w: %v %v", v, err)
	}
	if v, err := f.Tensor("h").Float32s(); err != nil || !reflect.DeepEqual(v, []float32{1, -2}) {
		t.Errorf("h: %v %v", v, err)
	}
	if v, err := f.Tensor("scalar").Float32s(); err != nil || !reflect.DeepEqual(v, []float32{0.5}) {
		t.Errorf("scalar: %v %v", v, err)
	}
	if v, err := f.Tensor("idx").Int32s(); err != nil || !reflect.DeepEqual(v, []int32{-1, 7}) {
		t.Errorf("idx: %v %v", v, err)
	}
	if _, err := f.Tensor("idx").Float32s(); err == nil {
		t.Error("I32 converted to float32")
	}
	if _, err := f.Tensor("w").Int32s(); err == nil {
		t.Error("F32 read as int32")
	}
}

func TestHalfAndBFloat16(t *testing.T) {
	cases := []struct {
		bits uint16
		want float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 5.960464477539063e-08}, {0x8000, float32(math.Copysign(0, -1))}, {0x7c00, float32(math.Inf(1))}}
	for _, c := range cases {
		if got := halfToFloat32(c.bits); got != c.want || math.Signbit(float64(got)) != math.Signbit(float64(c.want)) {
			t.Errorf("half %#04x: got %v, want %v", c.bits, got, c.want)
		}
	}
	if v := halfToFloat32(0x7e00); !math.IsNaN(float64(v)) {
		t.Errorf("half NaN: %v", v)
	}
	bf := Tensor{Name: "b", DType: BF16, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x49, 0x40}} // 1, 3.140625
	if v, err := bf.Float32s(); err != nil || v[0] != 1 || v[1] != 3.140625 {
		t.Errorf("bf16: %v %v", v, err)
	}
}

// A file as PyTorch's safetensors writes it: no checksums, names in
// another order than the data, header padded, U8 and I64 beside F32.
func TestForeignWriterLoads(t *testing.T) {
	h := `{"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[ 1 , 1 ],"data_offsets":[8,12]},"c":{"dtype":"U8","shape":[2],"data_offsets":[12,14]}}   `
	data := make([]byte, 14)
	binary.LittleEndian.PutUint32(data[8:], math.Float32bits(2.5))
	f, err := Parse("torch.safetensors", raw(h, data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Checksummed || f.Metadata["format"] != "pt" || len(f.Tensors) != 3 || f.Tensors[0].Name != "b" {
		t.Errorf("%+v", f)
	}
	if v, _ := f.Tensor("a").Float32s(); len(v) != 1 || v[0] != 2.5 {
		t.Errorf("a = %v", v)
	}
	if _, err := f.Tensor("b").Int32s(); err == nil || !strings.Contains(err.Error(), "I64") {
		t.Errorf("I64 as int32: %v", err)
	}
}

func TestHostileHeaders(t *testing.T) {
	f32 := func(name, shape, offs string) string {
		return `"` + name + `":{"dtype":"F32","shape":` + shape + `,"data_offsets":` + offs + `}`
	}
	cases := []struct {
		name, header string
		data         int
		want         string
	}{
		{"empty object", `{}`, 0, ""},
		{"not an object", `[1,2]`, 0, "not '{'"},
		{"bad json", `{"a":`, 0, "not valid JSON"},
		{"trailing garbage", `{}x`, 0, "not valid JSON"},
		{"two objects", `{}{}`, 0, "not valid JSON"},
		{"nul padding", "{}\x00\x00", 0, "not valid JSON"},
		{"bad utf8", "{\"a\xff\":1}", 0, "UTF-8"},
		{"duplicate tensor", `{` + f32("a", "[1]", "[0,4]") + `,` + f32("a", "[1]", "[4,8]") + `}`, 8, `"a" appears twice`},
		{"duplicate metadata", `{"__metadata__":{},"__metadata__":{}}`, 0, "twice"},
		{"duplicate metadata key", `{"__metadata__":{"k":"1","k":"2"}}`, 0, "twice"},
		{"duplicate field", `{"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}}`, 4, "twice"},
		{"metadata not string", `{"__metadata__":{"k":1}}`, 0, "not a string"},
		{"metadata not object", `{"__metadata__":"x"}`, 0, "not a JSON object"},
		{"unknown dtype", `{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, 4, `unknown dtype "F33"`},
		{"dtype number", `{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4, "not a string"},
		{"unknown field", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4, `unknown field "x"`},
		{"no dtype", `{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4, "no dtype"},
		{"no shape", `{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4, "no shape"},
		{"no offsets", `{"a":{"dtype":"F32","shape":[1]}}`, 4, "no data_offsets"},
		{"entry not object", `{"a":3}`, 0, "not a JSON object"},
		{"negative dim", `{` + f32("a", "[-1]", "[0,4]") + `}`, 4, "negative dimension"},
		{"float dim", `{` + f32("a", "[1.0]", "[0,4]") + `}`, 4, "not an integer"},
		{"string dim", `{` + f32("a", `["1"]`, "[0,4]") + `}`, 4, "not an integer"},
		{"huge dim", `{` + f32("a", "[99999999999999999999]", "[0,4]") + `}`, 4, "not an integer"},
		{"overflow", `{` + f32("a", "[4611686018427387904,4]", "[0,4]") + `}`, 4, "overflows"},
		{"shape vs bytes", `{` + f32("a", "[2]", "[0,4]") + `}`, 4, "span 4"},
		{"offsets reversed", `{` + f32("a", "[1]", "[4,0]") + `}`, 4, "end before"},
		{"offsets three", `{` + f32("a", "[1]", "[0,4,8]") + `}`, 4, "two integers"},
		{"offsets negative", `{` + f32("a", "[1]", "[-4,0]") + `}`, 4, "non-negative"},
		{"offsets past end", `{` + f32("a", "[1]", "[0,4]") + `}`, 2, "run past"},
		{"huge offsets", `{` + f32("a", "[1]", "[18446744073709551611,18446744073709551615]") + `}`, 4, "run past"},
		{"overlap", `{` + f32("a", "[2]", "[0,8]") + `,` + f32("b", "[1]", "[4,8]") + `}`, 8, "overlap"},
		{"gap", `{` + f32("a", "[1]", "[4,8]") + `}`, 8, "unused"},
		{"data after", `{` + f32("a", "[1]", "[0,4]") + `}`, 12, "8 bytes of data after"},
		{"empty name", `{` + f32("", "[1]", "[0,4]") + `}`, 4, "empty name"},
		{"bad checksums", `{"__metadata__":{"ferry.crc32c":"nope"},` + f32("a", "[1]", "[0,4]") + `}`, 4, "not a JSON object"},
		{"checksum missing", `{"__metadata__":{"ferry.crc32c":"{}"},` + f32("a", "[1]", "[0,4]") + `}`, 4, "no checksum recorded"},
		{"checksum extra", `{"__metadata__":{"ferry.crc32c":"{\"b\":\"00000000\"}"}}`, 0, `"b", which the file does not hold`},
		{"checksum not hex", `{"__metadata__":{"ferry.crc32c":"{\"a\":\"xyz\"}"},` + f32("a", "[1]", "[0,4]") + `}`, 4, "8 hex digits"},
		{"checksum wrong", `{"__metadata__":{"ferry.crc32c":"{\"a\":\"00000001\"}"},` + f32("a", "[1]", "[0,4]") + `}`, 4, "corrupted"},
		{"deep nesting", `{"__metadata__":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("hostile.safetensors", raw(c.header, make([]byte, c.data)))
			switch {
			case c.want == "" && c.name == "empty object":
				if err != nil {
					t.Errorf("refused: %v", err)
				}
			case err == nil:
				t.Errorf("accepted")
			case !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "hostile.safetensors"):
				t.Errorf("error %q does not say %q and name the file", err, c.want)
			}
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Errorf("%T is not *Error", err)
			}
		})
	}
}

func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	good := encode(t, sample(), nil)
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), make([]byte, 64)...)
	corrupt := append([]byte{}, good...)
	corrupt[len(corrupt)-1] ^= 0x10 // a bit of the last tensor's data
	hdr := append([]byte{}, good...)
	hdr[bytes.IndexByte(hdr, ':')] = '!' // inside the JSON header
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":         {nil, "too short"},
		"short":         {[]byte{1, 2, 3}, "too short"},
		"truncated":     {good[:len(good)-3], "run past"},
		"header cut":    {good[:40], "runs past the end"},
		"png":           {png, "over the 100000000-byte limit"},
		"zeros":         {make([]byte, 64), "cannot hold"},
		"corrupt data":  {corrupt, "corrupted"},
		"corrupt head":  {hdr, "not valid JSON"},
		"huge header":   {binary.LittleEndian.AppendUint64(nil, 1<<62), "over the"},
		"header = file": {binary.LittleEndian.AppendUint64(nil, 8), "runs past"},
	}
	for name, c := range cases {
		p := filepath.Join(dir, name+".safetensors")
		os.WriteFile(p, c.data, 0o644)
		_, err := ReadFile(p, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming the file and saying %q", name, err, c.want)
		}
		if _, perr := Parse(p, c.data); (perr == nil) != (err == nil) {
			t.Errorf("%s: Parse says %v, ReadFile says %v", name, perr, err)
		}
	}
	p := filepath.Join(dir, "good.safetensors")
	os.WriteFile(p, good, 0o644)
	if _, err := ReadFile(p, 0); err != nil {
		t.Errorf("good file: %v", err)
	}
	if _, err := ReadFile(p, 16); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 0); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ReadFile(dir, 0); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := ReadFile("/dev/zero", 1<<20); err == nil {
			t.Error("/dev/zero was read")
		}
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	bad := [][]Tensor{
		{{Name: "", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}},
		{{Name: "__metadata__", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}},
		{FromFloat32s("a", []float32{1}, 1), FromFloat32s("a", []float32{1}, 1)},
		{{Name: "a", DType: "F33", Shape: []int{1}, Data: make([]byte, 4)}},
		{{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}},
		{{Name: "a", DType: F32, Shape: []int{-1}, Data: nil}},
	}
	for i, ts := range bad {
		if err := WriteFile(filepath.Join(dir, "x"), ts, nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "x")) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	if err := WriteFile(filepath.Join(dir, "x"), nil, map[string]string{ChecksumKey: "{}"}); err == nil {
		t.Error("the reserved metadata key was accepted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

func TestWriteReadOnlyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if os.Geteuid() == 0 { // root ignores permission bits; sysfs refuses even root
		if st, err := os.Stat("/sys"); err != nil || !st.IsDir() {
			t.Skip("running as root and no /sys: no read-only directory to write into")
		}
		dir = "/sys"
	}
	p := filepath.Join(dir, "w.safetensors")
	err := WriteFile(p, sample(), nil)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "cannot write") {
		t.Errorf("got %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "w.safetensors") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
