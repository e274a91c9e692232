package train

import (
	"math"
	"testing"
)

func TestCosine(t *testing.T) {
	c := Cosine{Peak: 1, Min: 0.1, Warmup: 10, Total: 110}
	for _, tc := range []struct {
		step int
		want float64
	}{{1, 0.1}, {10, 1}, {60, 0.55}, {110, 0.1}, {500, 0.1}} {
		if got := c.At(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	for _, bad := range []Cosine{{Peak: 0, Total: 1}, {Peak: math.NaN(), Total: 1}, {Peak: 1, Min: 2, Total: 1}, {Peak: 1, Total: 0}, {Peak: 1, Warmup: -1, Total: 5}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestMNISTLoads(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 11 MB of MNIST")
	}
	m, err := LoadMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	if m.TrainCount() != 60000 || m.TestCount() != 10000 || m.Pixels() != 784 {
		t.Fatalf("MNIST: %d train, %d test, %d pixels", m.TrainCount(), m.TestCount(), m.Pixels())
	}
	var sum float64
	for _, v := range m.TrainImages {
		sum += float64(v)
	}
	if mean := sum / float64(len(m.TrainImages)); math.Abs(mean) > 1e-3 {
		t.Errorf("normalised training mean %v, want about 0", mean)
	}
}

func TestMNISTDirErrors(t *testing.T) {
	t.Setenv("FERRY_MNIST_DIR", t.TempDir())
	if _, err := LoadMNIST(""); err == nil {
		t.Fatal("an empty directory loaded as MNIST")
	}
}

func TestEpochOrderIsAPermutationKeyedByEpoch(t *testing.T) {
	a, b, c := EpochOrder(1, 0, 100), EpochOrder(1, 0, 100), EpochOrder(1, 1, 100)
	seen := map[int]bool{}
	same := true
	for i := range a {
		seen[a[i]] = true
		if a[i] != b[i] {
			t.Fatal("EpochOrder is not deterministic")
		}
		same = same && a[i] == c[i]
	}
	if len(seen) != 100 || same {
		t.Fatal("not a permutation, or the same for two epochs")
	}
}
