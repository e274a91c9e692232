package isa

import (
	"os"
	"testing"
)

func TestLevel(t *testing.T) {
	if AVX512 && !AVX2 || AVX512BF16 && !AVX512 {
		t.Fatal("AVX512 without AVX2, or AVX512BF16 without AVX512")
	}
	want := os.Getenv("FERRY_CPU")
	if (want == "avx2" || want == "generic") && Level() != want {
		t.Errorf("FERRY_CPU=%s but Level() = %s", want, Level())
	}
	saved2, saved512, savedBF16 := AVX2, AVX512, AVX512BF16
	defer func() { AVX2, AVX512, AVX512BF16 = saved2, saved512, savedBF16 }()
	if err := lower("nonsense"); err == nil {
		t.Error("lower(nonsense) accepted")
	}
	if AVX2 {
		if err := lower("avx2"); err != nil || Level() != "avx2" || AVX512BF16 {
			t.Errorf("lower(avx2): %v, level %s", err, Level())
		}
		if err := lower("avx512"); err == nil {
			t.Error("lower(avx512) after avx2 accepted")
		}
	}
	if err := lower("generic"); err != nil || Level() != "generic" || AVX2 || AVX512 || AVX512BF16 {
		t.Errorf("lower(generic): %v, level %s", err, Level())
	}
}
