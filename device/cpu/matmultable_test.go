package cpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
	"ferry/internal/blas"
	"ferry/internal/gemm"
)

func tight(transA, transB bool, m, n, k int, alone bool) MatmulShape {
	s := MatmulShape{TransA: transA, TransB: transB, M: m, N: n, K: k, LDA: k, LDB: n, LDC: n, Alone: alone}
	if transA {
		s.LDA = m
	}
	if transB {
		s.LDB = k
	}
	return s
}

// ruleBLAS is the fixed rule's library in auto mode.
func ruleBLAS() bool { return gemm.Kernel() != "avx512" }

// The table decides by class: a neighbouring size (within a quarter
// octave) finds the class, another size, layout or per-head use does not;
// and a class leaves the rule's library only for one faster by more than
// the margin, weighting its shapes by their calls.
func TestMatmulTableDecidesByClass(t *testing.T) {
	fast, slow := 1e-3, 2e-3
	// Times that make the other library win clearly, and barely.
	other := func(s MatmulShape, calls int, clearly bool) MatmulChoice {
		c := MatmulChoice{MatmulShape: s, Calls: calls, GoSeconds: slow, BLASSeconds: slow}
		win := fast
		if !clearly {
			win = slow * (1 - tableMargin/2)
		}
		if ruleBLAS() {
			c.GoSeconds = win
		} else {
			c.BLASSeconds = win
		}
		return c
	}
	a := tight(false, true, 2048, 384, 1536, true)
	b := tight(true, false, 384, 1536, 2048, true)
	tab := &MatmulTable{}
	tab.Merge([]MatmulChoice{other(a, 6, true), other(b, 6, false)})
	for _, c := range []struct {
		s      MatmulShape
		ok     bool
		onRule bool
	}{
		{a, true, false},
		{tight(false, true, 1900, 400, 1500, true), true, false}, // same half octaves
		{tight(false, true, 4096, 384, 1536, true), false, false},
		{tight(false, false, 2048, 384, 1536, true), false, false},
		{tight(false, true, 2048, 384, 1536, false), false, false},
		{b, true, true}, // within the margin: the rule's
	} {
		use, ok := tab.Lookup(c.s)
		if ok != c.ok {
			t.Errorf("%v: found %v, want %v", c.s, ok, c.ok)
			continue
		}
		if ok && (use == ruleBLAS()) != c.onRule {
			t.Errorf("%v: OpenBLAS %v; the rule's is OpenBLAS %v, want on the rule's %v", c.s, use, ruleBLAS(), c.onRule)
		}
	}
	// Two shapes of one class: the heavier decides. a2 (same class as a)
	// favours the rule's library by more than a's gain × its calls.
	a2 := tight(false, true, 2000, 384, 1536, true)
	heavy := MatmulChoice{MatmulShape: a2, Calls: 100, GoSeconds: fast, BLASSeconds: fast}
	if ruleBLAS() {
		heavy.GoSeconds = slow
	} else {
		heavy.BLASSeconds = slow
	}
	tab2 := &MatmulTable{}
	tab2.Merge([]MatmulChoice{other(a, 6, true), heavy})
	if use, _ := tab2.Lookup(a); use != ruleBLAS() {
		t.Errorf("the class's heavier shape favours the rule, yet it chose OpenBLAS %v", use)
	}
	for _, c := range tab2.Shapes {
		if want := map[bool]string{true: libBLAS, false: libGo}[ruleBLAS()]; c.Library != want {
			t.Errorf("%v: library %q, want the class's %q", c.MatmulShape, c.Library, want)
		}
	}
	// Merging a new run replaces the class's earlier shapes.
	tab2.Merge([]MatmulChoice{other(a2, 1, true)})
	if len(tab2.Shapes) != 1 {
		t.Errorf("after merging a new measurement of the class: %d shapes, want 1", len(tab2.Shapes))
	}
	if use, _ := tab2.Lookup(a); use == ruleBLAS() {
		t.Errorf("the new measurement did not replace the class's decision")
	}
}

func TestMatmulTableFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "table.json")
	s := tight(false, false, 64, 64, 64, true)
	tab := &MatmulTable{Machine: MatmulMachine()}
	tab.Merge([]MatmulChoice{{MatmulShape: s, Calls: 3, GoSeconds: 1e-5, BLASSeconds: 2e-5}})
	if err := SaveMatmulTable(tab, path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadMatmulTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Shapes) != 1 || got.Shapes[0].MatmulShape != s || got.Shapes[0].Calls != 3 {
		t.Fatalf("read back %+v", got.Shapes)
	}
	if use, ok := got.Lookup(s); !ok || use {
		// Go is twice as fast: the class is Go's whatever the rule.
		t.Errorf("read back: lookup (%v, %v), want Go", use, ok)
	}

	write := func(name string, v any) string {
		p := filepath.Join(dir, name)
		var b []byte
		if str, ok := v.(string); ok {
			b = []byte(str)
		} else {
			b, _ = json.Marshal(v)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := func(mod func(*MatmulTable)) *MatmulTable {
		c := &MatmulTable{Version: matmulTableVersion, Machine: MatmulMachine(),
			Shapes: []MatmulChoice{{MatmulShape: s, GoSeconds: 1e-5, BLASSeconds: 2e-5}}}
		mod(c)
		return c
	}
	for name, c := range map[string]struct {
		content any
		want    string
	}{
		"garbage":   {"{not json", "is not a matmul table"},
		"empty":     {"", "is not a matmul table"},
		"version":   {bad(func(t *MatmulTable) { t.Version = 99 }), "version 99"},
		"machine":   {bad(func(t *MatmulTable) { t.Machine = "another CPU" }), "was measured on"},
		"zero dim":  {bad(func(t *MatmulTable) { t.Shapes[0].M = 0 }), "dimensions must be positive"},
		"stride":    {bad(func(t *MatmulTable) { t.Shapes[0].LDA = 3 }), "row stride"},
		"huge":      {bad(func(t *MatmulTable) { t.Shapes[0].M, t.Shapes[0].LDC = 1<<30, 1<<30 }), "over 4 GiB"},
		"no time":   {bad(func(t *MatmulTable) { t.Shapes[0].GoSeconds = 0 }), "times"},
		"neg calls": {bad(func(t *MatmulTable) { t.Shapes[0].Calls = -1 }), "calls"},
	} {
		p := write(strings.ReplaceAll(name, " ", "_")+".json", c.content)
		if _, err := LoadMatmulTable(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	if _, err := LoadMatmulTable(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing table loaded")
	}
	// A save that fails leaves the old table whole.
	if err := SaveMatmulTable(tab, filepath.Join(dir, "sub")); err == nil {
		t.Error("saving over a directory succeeded")
	}
	if _, err := LoadMatmulTable(path); err != nil {
		t.Errorf("after a failed save elsewhere: %v", err)
	}
}

// The table in use routes each product to its class's library, and
// recording counts the products by shape, in the order first seen.
func TestMatmulTableRoutesAndRecords(t *testing.T) {
	if !blas.Available() {
		t.Skip(blas.Reason())
	}
	if matmulMode.Load() != 0 {
		t.Skip("FERRY_MATMUL forces a library")
	}
	onGo := tight(false, false, 96, 80, 64, true)
	onBLAS := tight(false, true, 48, 80, 64, true)
	tab := &MatmulTable{}
	tab.Merge([]MatmulChoice{
		{MatmulShape: onGo, GoSeconds: 1e-6, BLASSeconds: 1e-3},
		{MatmulShape: onBLAS, GoSeconds: 1e-3, BLASSeconds: 1e-6},
	})
	prevT, _, _ := MatmulTableInUse()
	SetMatmulTable(tab)
	defer SetMatmulTable(prevT)

	d, err := New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	run := func(s MatmulShape) {
		t.Helper()
		ar, br := s.M, s.K
		if s.TransB {
			br = s.N
		}
		alloc := func(n int) *device.Block {
			blk, err := d.Allocator().Alloc(int64(4*n), device.Activation)
			if err != nil {
				t.Fatal(err)
			}
			return blk
		}
		a, b, c := alloc(ar*s.LDA), alloc(br*s.LDB), alloc(s.M*s.LDC)
		defer d.Allocator().Free(a)
		defer d.Allocator().Free(b)
		defer d.Allocator().Free(c)
		if err := d.Kernels().Gemm(device.GemmParams{TransA: s.TransA, TransB: s.TransB, M: s.M, N: s.N, K: s.K, Alpha: 1,
			A: a, LDA: s.LDA, B: b, LDB: s.LDB, C: c, LDC: s.LDC, Batch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	stop := RecordMatmulShapes()
	g0, b0 := MatmulCalls()
	run(onGo)
	g1, b1 := MatmulCalls()
	run(onBLAS)
	run(onBLAS)
	g2, b2 := MatmulCalls()
	shapes, calls := stop()
	if g1-g0 != 1 || b1 != b0 {
		t.Errorf("the Go class's product: %d on Go, %d on OpenBLAS; want 1 and 0", g1-g0, b1-b0)
	}
	if b2-b1 != 2 || g2 != g1 {
		t.Errorf("the OpenBLAS class's products: %d on OpenBLAS, %d on Go; want 2 and 0", b2-b1, g2-g1)
	}
	if len(shapes) != 2 || shapes[0] != onGo || shapes[1] != onBLAS || calls[0] != 1 || calls[1] != 2 {
		t.Errorf("recorded %v %v, want [%v %v] [1 2]", shapes, calls, onGo, onBLAS)
	}
	// Stopped: nothing more is recorded.
	run(onGo)
	if s2, _ := RecordMatmulShapes()(); len(s2) != 0 {
		t.Errorf("a new recording starts with %v", s2)
	}
	if !strings.Contains(MatmulBackend(), "per shape, the measured table") {
		t.Errorf("MatmulBackend does not mention the table: %s", MatmulBackend())
	}
}

func TestTuneMatmul(t *testing.T) {
	if !blas.Available() {
		if _, err := TuneMatmul([]MatmulShape{tight(false, false, 8, 8, 8, true)}, nil, TuneOptions{}); err == nil || !strings.Contains(err.Error(), "nothing to choose") {
			t.Errorf("without OpenBLAS: %v", err)
		}
		return
	}
	shapes := []MatmulShape{tight(false, true, 40, 24, 16, true), tight(true, false, 32, 32, 32, false)}
	shapes[1].LDB = 40 // a strided operand, as an attention's
	got, err := TuneMatmul(shapes, []int{5, 7}, TuneOptions{Rounds: 3, SampleSeconds: 1e-4})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		if c.MatmulShape != shapes[i] || c.Calls != []int{5, 7}[i] || !(c.GoSeconds > 0) || !(c.BLASSeconds > 0) {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
	for _, c := range []struct {
		shapes []MatmulShape
		calls  []int
		o      TuneOptions
		want   string
	}{
		{shapes, []int{1}, TuneOptions{}, "differ in length"},
		{shapes, nil, TuneOptions{Rounds: -1}, "rounds"},
		{shapes, nil, TuneOptions{SampleSeconds: -1}, "sample seconds"},
		{[]MatmulShape{{M: 0, N: 1, K: 1, LDA: 1, LDB: 1, LDC: 1}}, nil, TuneOptions{}, "positive"},
		{[]MatmulShape{{M: 1 << 20, N: 1 << 20, K: 1, LDA: 1, LDB: 1 << 20, LDC: 1 << 20}}, nil, TuneOptions{}, "4 GiB"},
	} {
		if _, err := TuneMatmul(c.shapes, c.calls, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
}
