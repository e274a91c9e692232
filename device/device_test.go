package device

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name, kind string
		index      int
		ok         bool
	}{
		{"cpu", "cpu", 0, true}, {"cuda:1", "cuda", 1, true}, {"meta:0", "meta", 0, true},
		{"", "", 0, false}, {":1", "", 0, false}, {"cuda:x", "", 0, false}, {"cuda:-1", "", 0, false},
	} {
		kind, index, err := ParseName(c.name)
		if (err == nil) != c.ok || (c.ok && (kind != c.kind || index != c.index)) {
			t.Errorf("ParseName(%q) = %q, %d, %v", c.name, kind, index, err)
		}
	}
}

type nullDriver struct{}

func (nullDriver) Open(int, Options) (Device, error) { return nil, nil }

var registered int // tests may run more than once (-count)

func TestRegistry(t *testing.T) {
	registered++
	kind := fmt.Sprintf("null%d", registered)
	Register(kind, nullDriver{})
	found := false
	for _, k := range Kinds() {
		found = found || k == kind
	}
	if !found {
		t.Fatalf("Kinds() = %v lacks a registered driver", Kinds())
	}
	if _, err := Open(kind+":3", Options{}); err != nil {
		t.Fatalf("Open: %v", err)
	}
	_, err := Open("nosuch", Options{})
	if err == nil || !strings.Contains(err.Error(), `no driver for "nosuch"`) || !strings.Contains(err.Error(), "ferry/device/nosuch") {
		t.Fatalf("Open of an unknown kind: %v", err)
	}
	if _, err := Open("bad:name:x", Options{}); err == nil {
		t.Fatalf("Open of a malformed name succeeded")
	}
	defer func() {
		if recover() == nil {
			t.Errorf("registering a kind twice did not panic")
		}
	}()
	Register(kind, nullDriver{})
}

func TestLayoutHelpers(t *testing.T) {
	if got := Contiguous([]int{2, 3, 4}); len(got) != 3 || got[0] != 12 || got[1] != 4 || got[2] != 1 {
		t.Errorf("Contiguous = %v", got)
	}
	if Numel([]int{2, 3, 4}) != 24 || Numel(nil) != 1 {
		t.Errorf("Numel wrong")
	}
	for _, c := range []struct {
		shape, strides []int
		want           bool
	}{
		{[]int{2, 3}, []int{3, 1}, true},
		{[]int{2, 3}, []int{1, 2}, false},
		{[]int{2, 1, 3}, []int{3, 99, 1}, true}, // a size-1 axis may have any stride
		{[]int{2, 3}, []int{0, 1}, false},
		{[]int{}, []int{}, true},
	} {
		v := View{Shape: c.shape, Strides: c.strides}
		if v.IsContiguous() != c.want {
			t.Errorf("IsContiguous(%v, %v) = %v", c.shape, c.strides, !c.want)
		}
	}
	if Float32.Size() != 4 || Int32.Size() != 4 || BFloat16.Size() != 2 || Float16.Size() != 2 {
		t.Errorf("DType sizes wrong")
	}
	if Float32.String() != "float32" || DType(9).String() != "dtype(9)" {
		t.Errorf("DType names wrong")
	}
	if ReLU.String() != "relu" || GELUTanhGrad.String() != "gelu_tanh_backward" {
		t.Errorf("op names wrong")
	}
}

func TestCategoryNames(t *testing.T) {
	for c := Category(0); c < NumCategories; c++ {
		back, err := ParseCategory(c.String())
		if err != nil || back != c {
			t.Errorf("ParseCategory(%q) = %v, %v", c, back, err)
		}
	}
	if _, err := ParseCategory("weights"); err == nil {
		t.Errorf("ParseCategory of an unknown name succeeded")
	}
	if Category(42).String() != "category(42)" {
		t.Errorf("unknown category name %q", Category(42))
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {16 << 20, "16.00 MiB"},
		{3 << 30, "3.00 GiB"}, {5 << 40, "5.00 TiB"}, {3 << 50, "3.00 PiB"}, {-2048, "-2.00 KiB"},
	} {
		if got := FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
