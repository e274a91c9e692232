package cpu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"ferry/internal/blas"
	"ferry/internal/fsx"
	"ferry/internal/gemm"
	"ferry/internal/isa"
)

// Note [matmul table]. Which library is faster for a matrix product
// depends on the CPU and on the product's shape: on an AVX-512 CPU the
// pure-Go kernel usually wins, on an AVX2-only one OpenBLAS usually does,
// and an attention's small products or a thin classifier head may go the
// other way on either. A fixed rule (matmulMode's auto) cannot know the
// machine, so auto also consults a table measured on this machine:
// TuneMatmul times each product shape of a workload on both libraries,
// the way the CPU device runs it, and `ferry tune` saves the choices to
// a file in the user's cache directory, named after the machine
// (MatmulTablePath), which every later process in auto mode reads once,
// at its first product.
//
// The table is keyed by shape class, not exact shape (MatmulShape.class:
// each dimension rounded to a half octave, the transpositions, and
// whether the product runs alone or beside others as an attention's
// heads do), so that a batch of 250 finds the choice made for 256. Within
// a class the library with the lower total time over the class's
// measured shapes (weighted by calls per step) wins, but the rule's
// library keeps a class unless the other is faster by more than
// tableMargin. Products timed one at a time miss what they do to each
// other in a step (caches, the cores they share), so `ferry tune` then
// times whole training steps with these choices, with all of the run's
// classes on pure Go and all on OpenBLAS, and keeps the fastest
// (MatmulChoice.StepLibrary records a whole-step decision). A product of a
// class the table does not hold follows the fixed rule.
//
// Bits: a product's bits depend on the library, so the table changes them
// for the classes it moves, the same way on every call of the process
// (the table is read once and then fixed), so recomputation and
// replays still reproduce forward bit for bit. A table written for another
// machine (its Machine signature differs: CPU, FERRY_CPU level, OpenBLAS
// library and core type, cores) is ignored, and MatmulBackend says why.

// MatmulShape is a matrix product as the CPU device runs it:
// C (M×N, row stride LDC) = op(A) (M×K) · op(B) (K×N), row-major, A and
// B with row strides LDA and LDB. Alone is false for the products an
// attention runs on each head, one goroutine per head, all cores at once
// (sgemmSerial); true for the others, which use every core themselves.
type MatmulShape struct {
	TransA bool `json:"trans_a"`
	TransB bool `json:"trans_b"`
	M      int  `json:"m"`
	N      int  `json:"n"`
	K      int  `json:"k"`
	LDA    int  `json:"lda"`
	LDB    int  `json:"ldb"`
	LDC    int  `json:"ldc"`
	Alone  bool `json:"alone"`
}

// String is the shape as "NT 2048×1152×384" (plus " per head" when not
// alone).
func (s MatmulShape) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	str := fmt.Sprintf("%s%s %d×%d×%d", t(s.TransA), t(s.TransB), s.M, s.N, s.K)
	ac, bc := s.K, s.N
	if s.TransA {
		ac = s.M
	}
	if s.TransB {
		bc = s.K
	}
	if s.LDA != ac || s.LDB != bc || s.LDC != s.N {
		str += fmt.Sprintf(" strides %d,%d,%d", s.LDA, s.LDB, s.LDC)
	}
	if !s.Alone {
		str += " per head"
	}
	return str
}

// check reports whether the shape can be allocated and timed.
func (s MatmulShape) check() error {
	ar, ac, br, bc := s.M, s.K, s.K, s.N
	if s.TransA {
		ar, ac = ac, ar
	}
	if s.TransB {
		br, bc = bc, br
	}
	switch {
	case s.M < 1 || s.N < 1 || s.K < 1:
		return fmt.Errorf("shape %v: dimensions must be positive", s)
	case s.LDA < ac || s.LDB < bc || s.LDC < s.N:
		return fmt.Errorf("shape %v: a row stride is shorter than its row (lda %d, ldb %d, ldc %d)", s, s.LDA, s.LDB, s.LDC)
	case float64(ar)*float64(s.LDA)+float64(br)*float64(s.LDB)+float64(s.M)*float64(s.LDC) > 1<<30:
		return fmt.Errorf("shape %v: over 4 GiB of operands", s)
	}
	return nil
}

// matmulClass is the table's key: a shape with each dimension rounded
// to a half octave.
type matmulClass struct {
	transA, transB, alone bool
	m, n, k               int16
}

func halfOctave(d int) int16 { return int16(math.Round(2 * math.Log2(float64(max(d, 1))))) }

func (s MatmulShape) class() matmulClass {
	return matmulClass{s.TransA, s.TransB, s.Alone, halfOctave(s.M), halfOctave(s.N), halfOctave(s.K)}
}

// MatmulChoice is one measured shape: the median wall time of one product
// on each library, how many such products a step ran when the shape was
// recorded, and the library its class uses ("go" or "openblas").
type MatmulChoice struct {
	MatmulShape
	Calls       int     `json:"calls"`
	GoSeconds   float64 `json:"go_seconds"`
	BLASSeconds float64 `json:"openblas_seconds"`
	Library     string  `json:"library"`
	// StepLibrary, when set, decides the class instead of the times:
	// whole training steps ran faster with every product of the run that
	// measured this shape on that one library than with the per-shape
	// choices (ferry tune's check).
	StepLibrary string `json:"step_library,omitempty"`
}

// MatmulTable is what `ferry tune` saves: the machine it was measured on
// and its measured shapes.
type MatmulTable struct {
	Version int            `json:"version"`
	Machine string         `json:"machine"`
	Shapes  []MatmulChoice `json:"shapes"`

	byClass map[matmulClass]bool // true: OpenBLAS; filled by index
}

const matmulTableVersion = 1

// Library names in tables and reports.
const (
	libGo   = "go"
	libBLAS = "openblas"
)

// tableMargin is how much faster the other library must be for a class
// to leave the fixed rule's.
const tableMargin = 0.02

// RuleLibrary is the library auto mode's fixed rule takes where OpenBLAS
// loads and no table decides: "go" where the pure-Go kernel is the
// AVX-512 one, else "openblas".
func RuleLibrary() string {
	if gemm.Kernel() == "avx512" {
		return libGo
	}
	return libBLAS
}

// index decides each class: by the whole-step check's library where one
// of its shapes has one (StepLibrary), else by the lower total time over
// its shapes, each weighted by its calls (at least 1), the rule's library
// keeping the class within tableMargin; and writes the decision into every
// shape's Library.
func (t *MatmulTable) index() {
	type sums struct {
		goS, blasS float64
		step       string
	}
	tot := map[matmulClass]*sums{}
	for _, c := range t.Shapes {
		s := tot[c.class()]
		if s == nil {
			s = &sums{}
			tot[c.class()] = s
		}
		w := float64(max(c.Calls, 1))
		s.goS += w * c.GoSeconds
		s.blasS += w * c.BLASSeconds
		if c.StepLibrary != "" {
			s.step = c.StepLibrary
		}
	}
	// The rule's library keeps a class unless the other is faster by
	// more than tableMargin: closer than that is noise, and moving would
	// change the class's bits for nothing.
	ruleBLAS := RuleLibrary() == libBLAS
	t.byClass = make(map[matmulClass]bool, len(tot))
	for k, s := range tot {
		if s.step != "" {
			t.byClass[k] = s.step == libBLAS
			continue
		}
		if ruleBLAS {
			t.byClass[k] = !(s.goS < s.blasS*(1-tableMargin))
		} else {
			t.byClass[k] = s.blasS < s.goS*(1-tableMargin)
		}
	}
	for i := range t.Shapes {
		t.Shapes[i].Library = libGo
		if t.byClass[t.Shapes[i].class()] {
			t.Shapes[i].Library = libBLAS
		}
	}
}

// Merge adds measured shapes to t, replacing those of the same class
// measured before (a class is decided by one measurement run, not a mix
// of runs made under different loads).
func (t *MatmulTable) Merge(choices []MatmulChoice) {
	fresh := map[matmulClass]bool{}
	for _, c := range choices {
		fresh[c.class()] = true
	}
	t.Shapes = slices.DeleteFunc(t.Shapes, func(c MatmulChoice) bool { return fresh[c.class()] })
	t.Shapes = append(t.Shapes, choices...)
	t.index()
}

// WithStepLibrary is a copy of t in which the classes of shapes are
// decided by lib ("go" or "openblas"; "" lets their times decide again).
func (t *MatmulTable) WithStepLibrary(shapes []MatmulChoice, lib string) *MatmulTable {
	in := map[matmulClass]bool{}
	for _, c := range shapes {
		in[c.class()] = true
	}
	u := &MatmulTable{Version: t.Version, Machine: t.Machine, Shapes: slices.Clone(t.Shapes)}
	for i := range u.Shapes {
		if in[u.Shapes[i].class()] {
			u.Shapes[i].StepLibrary = lib
		}
	}
	u.index()
	return u
}

// Lookup says whether the table holds s's class and, if so, whether
// OpenBLAS runs it.
func (t *MatmulTable) Lookup(s MatmulShape) (useBLAS, ok bool) {
	useBLAS, ok = t.byClass[s.class()]
	return
}

// MatmulMachine is this process's machine signature, as tables record it:
// the CPU's name, the vector level ferry uses (FERRY_CPU caps it), the
// pure-Go kernel, the OpenBLAS library and its core type, how OpenBLAS is
// threaded, and the cores Go runs on.
func MatmulMachine() string {
	blasPart := "no OpenBLAS (" + blas.Reason() + ")"
	if blas.Available() {
		blasPart = "openblas " + blas.Library()
		if ct := os.Getenv("OPENBLAS_CORETYPE"); ct != "" {
			blasPart += " coretype " + ct
		}
		if blasOwnThreads() {
			blasPart += " on its own threads"
		}
	}
	return fmt.Sprintf("%s; simd %s; kernel %s; %s; %d cores", cpuName(), isa.Level(), gemm.Kernel(), blasPart, runtime.GOMAXPROCS(0))
}

// cpuName is the CPU's model name from /proc/cpuinfo, with its family
// and model numbers where it gives them (a virtual machine's name, "AMD
// EPYC", says nothing of the generation), or the architecture where there
// is none.
var cpuName = sync.OnceValue(func() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			break // the first processor's block is enough
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	name := fields["model name"]
	if name == "" {
		return runtime.GOARCH
	}
	if fam, model := fields["cpu family"], fields["model"]; fam != "" && model != "" {
		name += fmt.Sprintf(" (family %s, model %s)", fam, model)
	}
	return name
})

// CPUName is the CPU as benchmarks and tables name it: its model name,
// family and model numbers.
func CPUName() string { return cpuName() }

// MatmulTablePath is where this machine's table lives: the user's cache
// directory, ferry/matmul-<hash of MatmulMachine()>.json, so that each
// setting (FERRY_CPU, OPENBLAS_CORETYPE, GOMAXPROCS) has its own.
func MatmulTablePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the matmul table (%v); set XDG_CACHE_HOME or HOME", err)
	}
	h := fnv.New64a()
	io.WriteString(h, MatmulMachine())
	return filepath.Join(dir, "ferry", fmt.Sprintf("matmul-%016x.json", h.Sum64())), nil
}

// LoadMatmulTable reads a table saved by SaveMatmulTable. It refuses a
// file that is not one, or that was measured on another machine (its
// signature differs from MatmulMachine()).
func LoadMatmulTable(path string) (*MatmulTable, error) {
	b, err := fsx.ReadLimited(path, 16<<20)
	if err != nil {
		return nil, err
	}
	var t MatmulTable
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s is not a matmul table (%v); run ferry tune again", path, err)
	}
	if t.Version != matmulTableVersion {
		return nil, fmt.Errorf("%s has version %d, this ferry reads %d; run ferry tune again", path, t.Version, matmulTableVersion)
	}
	if m := MatmulMachine(); t.Machine != m {
		return nil, fmt.Errorf("%s was measured on %q, this is %q; run ferry tune here", path, t.Machine, m)
	}
	for _, c := range t.Shapes {
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if !(c.GoSeconds > 0 && c.BLASSeconds > 0) || math.IsInf(c.GoSeconds+c.BLASSeconds, 0) || c.Calls < 0 {
			return nil, fmt.Errorf("%s: shape %v has times %v and %v and %d calls; run ferry tune again", path, c.MatmulShape, c.GoSeconds, c.BLASSeconds, c.Calls)
		}
		if c.StepLibrary != "" && c.StepLibrary != libGo && c.StepLibrary != libBLAS {
			return nil, fmt.Errorf("%s: shape %v has step library %q (want %q or %q); run ferry tune again", path, c.MatmulShape, c.StepLibrary, libGo, libBLAS)
		}
	}
	t.index()
	return &t, nil
}

// SaveMatmulTable writes t to path atomically (the old file stays whole
// on any error), creating the directory.
func SaveMatmulTable(t *MatmulTable, path string) error {
	if t.Version == 0 {
		t.Version = matmulTableVersion
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return fsx.WriteAtomic(path, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
}

// The table in use: set by SetMatmulTable, or read once from
// FERRY_MATMUL_TABLE (a path, or "off") or MatmulTablePath at the first
// product in auto mode.
var (
	tableOnce sync.Once
	tableUsed atomic.Pointer[tableState]
)

type tableState struct {
	t    *MatmulTable // nil: none
	path string
	note string // why none, when a file was there but refused
}

func activeTable() *tableState {
	tableOnce.Do(func() {
		if tableUsed.Load() == nil {
			tableUsed.Store(readTable())
		}
	})
	return tableUsed.Load()
}

// MatmulTableFile is the table file ferry reads: the path
// FERRY_MATMUL_TABLE names (named is then true), or this machine's in the
// cache directory (MatmulTablePath); "" with FERRY_MATMUL_TABLE=off.
func MatmulTableFile() (path string, named bool, err error) {
	switch env := strings.TrimSpace(os.Getenv("FERRY_MATMUL_TABLE")); env {
	case "off":
		return "", true, nil
	case "":
		path, err = MatmulTablePath()
		return path, false, err
	default:
		return env, true, nil
	}
}

func readTable() *tableState {
	path, named, err := MatmulTableFile()
	switch {
	case err != nil:
		return &tableState{}
	case path == "":
		return &tableState{note: "FERRY_MATMUL_TABLE=off"}
	}
	if _, err := os.Stat(path); !named && errors.Is(err, os.ErrNotExist) {
		return &tableState{}
	}
	t, err := LoadMatmulTable(path)
	if err != nil {
		if named {
			// Named by the user: say so at once, not only in ferry doctor.
			fmt.Fprintf(os.Stderr, "ferry: FERRY_MATMUL_TABLE=%s ignored: %v\n", path, err)
		}
		return &tableState{path: path, note: err.Error()}
	}
	return &tableState{t: t, path: path}
}

// SetMatmulTable makes t the table of every CPU device of the process
// (nil: none, the fixed rule alone), in place of the one read from the
// cache. Products running meanwhile may use either. t must not change
// afterwards (Merge a copy instead).
func SetMatmulTable(t *MatmulTable) {
	tableOnce.Do(func() {})
	tableUsed.Store(&tableState{t: t, path: "set by the program"})
}

// MatmulTableInUse is the table auto mode consults and where it came from
// (nil and "" when none), with the reason a file was refused, if one was.
func MatmulTableInUse() (t *MatmulTable, from, refused string) {
	s := activeTable()
	return s.t, s.path, s.note
}

// Shape recording, for TuneMatmul's callers: while on, every product the
// CPU device runs is counted by shape.
var (
	recording atomic.Bool
	rec       struct {
		sync.Mutex
		counts map[MatmulShape]int // nil when off
		order  []MatmulShape       // the counted shapes, first seen first
	}
)

// RecordMatmulShapes starts counting the products the CPU devices run,
// by shape; the returned stop ends it and returns the shapes in the order
// first seen, with their counts. One recording at a time.
func RecordMatmulShapes() (stop func() (shapes []MatmulShape, calls []int)) {
	rec.Lock()
	rec.counts, rec.order = map[MatmulShape]int{}, nil
	rec.Unlock()
	recording.Store(true)
	return func() (shapes []MatmulShape, calls []int) {
		recording.Store(false)
		rec.Lock()
		defer rec.Unlock()
		shapes = rec.order
		calls = make([]int, len(shapes))
		for i, s := range shapes {
			calls[i] = rec.counts[s]
		}
		rec.counts, rec.order = nil, nil
		return shapes, calls
	}
}

func record(s MatmulShape) {
	rec.Lock()
	if rec.counts != nil {
		if _, seen := rec.counts[s]; !seen {
			rec.order = append(rec.order, s)
		}
		rec.counts[s]++
	}
	rec.Unlock()
}
