package ferry_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/nn"
)

// docs/precision.md's tables of what autograd saves in a GPT ("What autograd
// saves, and what stays float32") are checked against what the ops save in
// a step. The doc's cost of saving the logits in bf16 instead was measured
// with
//
//	ferry demo --model gpt --device meta --modes none --precision bf16 --json
//
// (GPT-2 124M, batch 8 × 1024): peak_step_bytes 7,967,848,960 as the code
// is, 8,791,259,648 with CrossEntropy reshaping bf16 logits before widening
// them (so that it saves them in bf16): 823,410,688 bytes more, 8 × 1024 ×
// 50257 × 2, the bf16 logits.

// savedSlot names one tensor an op saves: the op's module scope (inside a
// block without the "transformer.h.N." prefix, which "h." stands for), the
// op, and its save slot.
type savedSlot struct {
	scope, op string
	slot      int
}

// precisionTableRows are the tables' rows, by their first two cells, with
// the saves each describes. A row the doc gains, loses or rewords is to be
// changed here too.
var precisionTableRows = []struct {
	savedBy, tensor string
	saves           []savedSlot
}{
	// Per block.
	{"`ln_1`, `ln_2`", "input (the residual stream)", []savedSlot{{"h.ln_1", "layer_norm", 0}, {"h.ln_2", "layer_norm", 0}}},
	{"`ln_1`, `ln_2`", "mean, rstd", []savedSlot{{"h.ln_1", "layer_norm", 1}, {"h.ln_1", "layer_norm", 2}, {"h.ln_2", "layer_norm", 1}, {"h.ln_2", "layer_norm", 2}}},
	{"`c_attn`", "bf16 copy of `ln_1`'s output", []savedSlot{{"h.attn.c_attn", "linear", 0}}},
	{"`c_attn`", "weight copy", []savedSlot{{"h.attn.c_attn", "linear", 1}}},
	{"attention", "q, k, v (views of `c_attn`'s output), output", []savedSlot{{"h.attn", "attention", 0}, {"h.attn", "attention", 1}, {"h.attn", "attention", 2}, {"h.attn", "attention", 3}}},
	{"attention", "log-sum-exp per row", []savedSlot{{"h.attn", "attention", 4}}},
	{"`attn.c_proj`", "attention output, heads merged (a copy, as nanoGPT's `.contiguous().view()`)", []savedSlot{{"h.attn.c_proj", "linear", 0}}},
	{"`attn.c_proj`", "weight copy", []savedSlot{{"h.attn.c_proj", "linear", 1}}},
	{"`c_fc`", "bf16 copy of `ln_2`'s output", []savedSlot{{"h.mlp.c_fc", "linear", 0}}},
	{"`c_fc`", "weight copy", []savedSlot{{"h.mlp.c_fc", "linear", 1}}},
	{"GELU", "pre-activation", []savedSlot{{"h.mlp", "gelu_tanh", 0}}},
	{"`mlp.c_proj`", "GELU output", []savedSlot{{"h.mlp.c_proj", "linear", 0}}},
	{"`mlp.c_proj`", "weight copy", []savedSlot{{"h.mlp.c_proj", "linear", 1}}},
	// Outside the blocks.
	{"`wte`", "token ids", []savedSlot{{"transformer.wte", "embedding", 0}}},
	{"`ln_f`", "input (the residual stream)", []savedSlot{{"transformer.ln_f", "layer_norm", 0}}},
	{"`ln_f`", "mean, rstd", []savedSlot{{"transformer.ln_f", "layer_norm", 1}, {"transformer.ln_f", "layer_norm", 2}}},
	{"`lm_head`", "bf16 copy of `ln_f`'s output", []savedSlot{{"lm_head", "linear", 0}}},
	{"`lm_head`", "weight copy (`wte`'s, the head being tied)", []savedSlot{{"lm_head", "linear", 1}}},
	{"cross-entropy", "logits, widened and reshaped by the cross-entropy", []savedSlot{{"", "cross_entropy", 0}}},
	{"cross-entropy", "each row's maximum and log-sum", []savedSlot{{"", "cross_entropy", 1}}},
	{"cross-entropy", "target", []savedSlot{{"", "cross_entropy", 2}}},
}

// docSavedRow is one row of the doc's tables.
type docSavedRow struct {
	savedBy, tensor, shape string
	types                  [2]string // the bf16 run's cell, the float32 run's
	block                  bool      // in the per-block table (the first)
	line                   int
}

// readPrecisionTables returns the rows of the tables in docs/precision.md's
// section on saved tensors.
func readPrecisionTables(t *testing.T) []docSavedRow {
	t.Helper()
	const (
		path    = "docs/precision.md"
		section = "## What autograd saves, and what stays float32"
		header  = "| saved by | tensor | shape | bf16 run | float32 run |"
	)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	at := slices.Index(lines, section)
	if at < 0 {
		t.Fatalf("%s has no line %q", path, section)
	}
	var rows []docSavedRow
	tables := 0
	inTable := false
	for i := at + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case !strings.HasPrefix(l, "|"):
			inTable = false
		case l == header:
			inTable = true
			tables++
		case !inTable || strings.HasPrefix(l, "|---"):
		default:
			cells := strings.Split(strings.Trim(l, "|"), "|")
			if len(cells) != 5 {
				t.Fatalf("%s:%d: %d cells, want 5: %s", path, i+1, len(cells), l)
			}
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, docSavedRow{savedBy: cells[0], tensor: cells[1], shape: cells[2],
				types: [2]string{cells[3], cells[4]}, block: tables == 1, line: i + 1})
		}
	}
	if tables != 2 {
		t.Fatalf("%s: %d tables headed %q in %q, want 2 (per block, then outside the blocks)", path, tables, header, section)
	}
	return rows
}

// docType reads a type cell: the type, or ok false for "—" (a parameter
// saved as itself, which the tables leave out).
func docType(t *testing.T, r docSavedRow, cell string) (dt device.DType, saved bool) {
	switch strings.Trim(cell, "*") {
	case "bf16":
		return device.BFloat16, true
	case "float32":
		return device.Float32, true
	case "int32":
		return device.Int32, true
	case "—":
		return device.Float32, false
	}
	t.Fatalf("docs/precision.md:%d: type %q is none of bf16, float32, int32, —", r.line, cell)
	return 0, false
}

// docShape evaluates a shape cell ("B × T × 4C", "B·T × V") at dims.
func docShape(t *testing.T, r docSavedRow, dims map[rune]int) []int {
	var shape []int
	for _, axis := range strings.Split(r.shape, "×") {
		n := 1
		for _, term := range strings.Split(strings.TrimSpace(axis), "·") {
			digits := strings.TrimRightFunc(term, unicode.IsLetter)
			k := 1
			if digits != "" {
				var err error
				if k, err = strconv.Atoi(digits); err != nil {
					t.Fatalf("docs/precision.md:%d: shape %q: %q", r.line, r.shape, term)
				}
			}
			for _, sym := range term[len(digits):] {
				d, ok := dims[sym]
				if !ok {
					t.Fatalf("docs/precision.md:%d: shape %q: no dimension %c", r.line, r.shape, sym)
				}
				k *= d
			}
			if term == "" {
				t.Fatalf("docs/precision.md:%d: shape %q has an empty term", r.line, r.shape)
			}
			n *= k
		}
		shape = append(shape, n)
	}
	return shape
}

// savedRecord is one tensor saved in a step.
type savedRecord struct {
	block     int // -1 outside the blocks
	at        savedSlot
	dtype     device.DType
	shape     []int
	parameter bool
}

func (s savedRecord) String() string {
	return fmt.Sprintf("%s (scope %q, slot %d), %s %v", s.at.op, s.at.scope, s.at.slot, s.dtype, s.shape)
}

// stepSaves runs one training step of m (forward under autocast dt, the
// cross-entropy, backward) and returns what its ops saved, in order.
func stepSaves(t *testing.T, dev device.Device, m *nn.GPT, batch int, dt device.DType) []savedRecord {
	t.Helper()
	var saves []savedRecord
	hooks := &ferry.SavedTensorHooks{
		Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
			s := savedRecord{block: -1, at: savedSlot{info.Module, info.Op, info.Slot}, dtype: x.DType(), shape: x.Shape(), parameter: info.Parameter}
			if rest, ok := strings.CutPrefix(info.Module, "transformer.h."); ok {
				n, scope, _ := strings.Cut(rest, ".")
				var err error
				if s.block, err = strconv.Atoi(n); err != nil {
					t.Fatalf("module %q", info.Module)
				}
				s.at.scope = "h." + scope
			}
			saves = append(saves, s)
			return x
		},
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	c := m.Config
	ids := make([]int32, batch*c.Seq)
	for i := range ids {
		ids[i] = int32(i % c.Vocab)
	}
	x := ferry.FromInt32s(dev, ids, batch, c.Seq)
	y := ferry.FromInt32s(dev, ids, batch, c.Seq)
	defer x.Release()
	defer y.Release()
	err := ferry.Step(func(tape *ferry.Tape) error {
		var l *ferry.Tensor
		tape.WithHooks(hooks, func() {
			var logits *ferry.Tensor
			tape.Autocast(dt, func() { logits = m.Forward(tape.Input(x)) })
			l = ferry.CrossEntropy(logits, tape.Input(y))
			logits.Release()
		})
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	return saves
}

// TestPrecisionTableIsTheCode checks docs/precision.md's tables of saved
// tensors against a bf16 and a float32 step of a small GPT on meta: every
// tensor the ops save (parameters saved as themselves aside) has a row,
// every row's tensors are saved, in the row's shape and in its type for
// each run, and every block saves the same.
func TestPrecisionTableIsTheCode(t *testing.T) {
	// Small sizes, each dimension distinct, so that a shape in the wrong
	// symbols fails; dropout on, to check that it saves nothing.
	const batch = 2
	cfg := nn.GPTConfig{Vocab: 40, Seq: 8, Layers: 2, Heads: 4, Embd: 24, Dropout: 0.1, Bias: true, Seed: 3}
	dims := map[rune]int{'B': batch, 'T': cfg.Seq, 'C': cfg.Embd, 'H': cfg.Heads, 'D': cfg.Embd / cfg.Heads, 'V': cfg.Vocab}

	rows := readPrecisionTables(t)
	type key struct{ savedBy, tensor string }
	doc := map[key]docSavedRow{}
	for _, r := range rows {
		k := key{r.savedBy, r.tensor}
		if _, dup := doc[k]; dup {
			t.Errorf("docs/precision.md:%d: a second row %q | %q", r.line, r.savedBy, r.tensor)
		}
		doc[k] = r
	}
	rowOf := map[savedSlot]key{}
	for _, r := range precisionTableRows {
		k := key{r.savedBy, r.tensor}
		if _, ok := doc[k]; !ok {
			t.Errorf("docs/precision.md has no row %q | %q (the test knows it: precisionTableRows)", r.savedBy, r.tensor)
		}
		for _, s := range r.saves {
			rowOf[s] = k
		}
	}
	known := map[key][]savedSlot{}
	for _, r := range precisionTableRows {
		known[key{r.savedBy, r.tensor}] = r.saves
	}
	for _, r := range rows {
		saves, ok := known[key{r.savedBy, r.tensor}]
		if !ok {
			t.Errorf("docs/precision.md:%d: row %q | %q is unknown to the test; say in precisionTableRows which saves it describes", r.line, r.savedBy, r.tensor)
			continue
		}
		for _, s := range saves {
			if inBlock := strings.HasPrefix(s.scope, "h."); inBlock != r.block {
				t.Errorf("docs/precision.md:%d: row %q | %q describes a save %s the blocks, but is in the other table", r.line, r.savedBy, r.tensor,
					map[bool]string{true: "inside", false: "outside"}[inBlock])
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	m, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)

	for run, dt := range []device.DType{device.BFloat16, device.Float32} {
		name := []string{"bf16", "float32"}[run]
		saves := stepSaves(t, dev, m, batch, dt)
		// Every block saves what block 0 does.
		perBlock := make([][]savedRecord, cfg.Layers)
		got := map[savedSlot]savedRecord{}
		for _, s := range saves {
			if s.block >= 0 {
				perBlock[s.block] = append(perBlock[s.block], s)
			}
			if s.block > 0 {
				continue
			}
			if prev, dup := got[s.at]; dup {
				t.Errorf("%s run: %s saved twice (%s)", name, s, prev)
			}
			got[s.at] = s
		}
		for i := 1; i < cfg.Layers; i++ {
			if !slices.EqualFunc(perBlock[i], perBlock[0], func(a, b savedRecord) bool {
				return a.at == b.at && a.dtype == b.dtype && slices.Equal(a.shape, b.shape) && a.parameter == b.parameter
			}) {
				t.Errorf("%s run: block %d saves %v, block 0 %v", name, i, perBlock[i], perBlock[0])
			}
		}
		// What the code saves has a row.
		for _, s := range got {
			if _, ok := rowOf[s.at]; !ok && !s.parameter {
				t.Errorf("%s run: the step saves %s, which docs/precision.md's tables do not list", name, s)
			}
		}
		// Each row is what the code saves.
		for _, r := range precisionTableRows {
			d, ok := doc[key{r.savedBy, r.tensor}]
			if !ok {
				continue
			}
			want, listed := docType(t, d, d.types[run])
			shape := docShape(t, d, dims)
			for _, at := range r.saves {
				s, saved := got[at]
				switch {
				case !listed:
					if saved && !s.parameter {
						t.Errorf("docs/precision.md:%d: %q | %q says a %s run saves no copy (—); it saves %s", d.line, r.savedBy, r.tensor, name, s)
					}
				case !saved || s.parameter:
					t.Errorf("docs/precision.md:%d: %q | %q: a %s run does not save %s (slot %d of %s in %q)", d.line, r.savedBy, r.tensor, name,
						map[bool]string{true: "a copy: it saves the parameter itself", false: "it"}[saved], at.slot, at.op, at.scope)
				default:
					if s.dtype != want {
						t.Errorf("docs/precision.md:%d: %q | %q: the doc says %s in a %s run; the code saves %s", d.line, r.savedBy, r.tensor, d.types[run], name, s)
					}
					if !slices.Equal(s.shape, shape) {
						t.Errorf("docs/precision.md:%d: %q | %q: shape %s is %v here; the code saves %s", d.line, r.savedBy, r.tensor, d.shape, shape, s)
					}
				}
			}
		}
	}
}
