package nn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"ferry"
	"ferry/device"
	"ferry/safetensors"
)

// Weights in the safetensors format, named as PyTorch names them, so that
// a model moves between ferry and PyTorch (model.load_state_dict(
// safetensors.torch.load_file(path)) on the other side). Files written
// here carry a CRC-32C per tensor, checked on load; see package
// safetensors.

// TiedAliases are names a file may use for a parameter that ferry lists
// under another name because the two are one tensor (a tied weight). The
// key is the file's name, the value the model's. PyTorch's state_dict
// lists a tied weight under both names, and safetensors' save_model keeps
// only the alphabetically first, so a nanoGPT file may hold lm_head.weight
// instead of (or beside) transformer.wte.weight. An alias applies only to
// a model that has the target parameter and none named as the alias.
var TiedAliases = map[string]string{"lm_head.weight": "transformer.wte.weight"}

// SaveSafetensors writes every parameter of m to path under its name in
// m (NamedParameters, e.g. "0.weight"), with __metadata__ {"format": "pt"}
// as PyTorch's save_model writes it. A tied parameter is listed once and
// so stored once. The file is replaced atomically.
func SaveSafetensors(path string, m Module) error {
	return SaveSafetensorsAs(path, m, device.Float32)
}

// SaveSafetensorsAs is SaveSafetensors with the parameters written as
// element type dt: device.Float32 (F32, the master weights as they are)
// or device.BFloat16 (BF16, rounded to nearest even: half the bytes, for
// sharing a model; a checkpoint keeps F32 to resume bit for bit).
func SaveSafetensorsAs(path string, m Module, dt device.DType) error {
	if dt != device.Float32 && dt != device.BFloat16 {
		return fmt.Errorf("nn.SaveSafetensorsAs %s: %s: want float32 or bfloat16", path, dt)
	}
	ps := NamedParameters(m)
	named := make(map[string]*ferry.Tensor, len(ps))
	for _, p := range ps {
		if p.Name == "" {
			return fmt.Errorf("nn.SaveSafetensors %s: a parameter of shape %v has no name", path, p.Tensor.Shape())
		}
		if named[p.Name] != nil {
			return fmt.Errorf("nn.SaveSafetensors %s: two parameters are named %q", path, p.Name)
		}
		named[p.Name] = p.Tensor
	}
	if err := saveTensors(path, named, map[string]string{"format": "pt"}, dt); err != nil {
		return fmt.Errorf("nn.SaveSafetensors: %w", err)
	}
	return nil
}

// SaveTensors writes named tensors (float32, bfloat16, int32 or uint8, on
// any device that holds values) and string metadata to a safetensors file at path,
// atomically. The metadata key safetensors.ChecksumKey is reserved.
func SaveTensors(path string, tensors map[string]*ferry.Tensor, metadata map[string]string) error {
	return saveTensors(path, tensors, metadata, device.Float32)
}

// saveTensors is SaveTensors writing float32 tensors as BF16 (rounded to
// nearest even) when as is device.BFloat16.
func saveTensors(path string, tensors map[string]*ferry.Tensor, metadata map[string]string, as device.DType) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]safetensors.Tensor, 0, len(names))
	err := ferry.Catch(func() error {
		for _, n := range names {
			t := tensors[n]
			if t == nil {
				return fmt.Errorf("tensor %q is nil", n)
			}
			switch t.DType() {
			case device.Float32:
				if as == device.BFloat16 {
					out = append(out, bf16Tensor(n, t.Float32s(), t.Shape()))
					break
				}
				out = append(out, safetensors.FromFloat32s(n, t.Float32s(), t.Shape()...))
			case device.BFloat16:
				w := ferry.Cast(t, device.Float32) // exact
				out = append(out, bf16Tensor(n, w.Float32s(), t.Shape()))
				w.Release()
			case device.Int32:
				out = append(out, safetensors.FromInt32s(n, t.Int32s(), t.Shape()...))
			case device.Uint8:
				out = append(out, safetensors.Tensor{Name: n, DType: safetensors.U8, Shape: slices.Clone(t.Shape()), Data: t.Uint8s()})
			default:
				return fmt.Errorf("tensor %q is %s; ferry saves float32, bfloat16, int32 and uint8", n, t.DType())
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return safetensors.WriteFile(path, out, metadata)
}

// LoadTensors reads every tensor of a safetensors file onto dev: F32 as
// float32 tensors, BF16 as bfloat16, F16 widened to float32 (exactly),
// I32 as int32 tensors, U8 as uint8 (quantised optimizer state). A tensor of any other dtype is an
// error (all of them named at once), and nothing is allocated. The caller
// owns the tensors. The metadata comes without the checksum key.
func LoadTensors(path string, dev device.Device) (map[string]*ferry.Tensor, map[string]string, error) {
	return LoadTensorsContext(context.Background(), path, dev)
}

// LoadTensorsContext is LoadTensors whose read stops, with an error
// wrapping context.Cause(ctx), once ctx is done.
func LoadTensorsContext(ctx context.Context, path string, dev device.Device) (map[string]*ferry.Tensor, map[string]string, error) {
	f, err := safetensors.ReadFileContext(ctx, path, 0)
	if err != nil {
		return nil, nil, err
	}
	var bad []string
	for _, st := range f.Tensors {
		if _, ok := ferryDType(st.DType); !ok {
			bad = append(bad, fmt.Sprintf("%s is %s", st.Name, st.DType))
		}
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("nn.LoadTensors %s: ferry holds F32, BF16 (and F16 widened to F32), I32 and U8 tensors only: %s", path, strings.Join(bad, "; "))
	}
	out := make(map[string]*ferry.Tensor, len(f.Tensors))
	err = ferry.Catch(func() error {
		for i := range f.Tensors {
			st := &f.Tensors[i]
			out[st.Name] = upload(dev, st, true)
		}
		return nil
	})
	if err != nil {
		for _, t := range out {
			t.Release()
		}
		return nil, nil, fmt.Errorf("nn.LoadTensors %s: %w", path, err)
	}
	return out, f.Metadata, nil
}

// LoadError is what LoadSafetensors returns when a file does not fit the
// model: every problem at once.
type LoadError struct {
	File       string
	Missing    []string // parameters of the model the file lacks
	Unexpected []string // tensors of the file the model lacks
	Mismatched []string // a sentence per tensor whose shape or dtype differs
	// Convention is how the file was read: its names above are the
	// model's, translated from the file's (see ConventionHFGPT2).
	Convention Convention
}

func (e *LoadError) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing %d: %s", len(e.Missing), strings.Join(e.Missing, ", ")))
	}
	if len(e.Unexpected) > 0 {
		parts = append(parts, fmt.Sprintf("unexpected %d: %s", len(e.Unexpected), strings.Join(e.Unexpected, ", ")))
	}
	if len(e.Mismatched) > 0 {
		parts = append(parts, fmt.Sprintf("mismatched %d: %s", len(e.Mismatched), strings.Join(e.Mismatched, "; ")))
	}
	conv := ""
	if e.Convention != "" && e.Convention != ConventionModel {
		conv = fmt.Sprintf(" (read as %s, names translated to the model's)", e.Convention)
	}
	return fmt.Sprintf("nn.LoadSafetensors %s: the file does not fit the model%s: %s", e.File, conv, strings.Join(parts, "; "))
}

// LoadSafetensors sets m's parameters from the safetensors file at path.
// A file in another naming convention is detected and translated first
// (DetectConvention): a GPT loads Hugging Face's GPT-2 files (h.N...,
// Conv1D weights transposed on load, the causal-mask buffers skipped).
// Names, shapes and dtypes must then match exactly (a float32 parameter takes
// an F32 tensor; no other dtype converts); otherwise it returns a *LoadError
// listing every missing, unexpected and mismatched tensor, and m is left
// untouched. A tied weight may appear in the file under an alias from
// TiedAliases instead of, or beside, its name in the model; beside it, the
// two must hold the same bytes. The tie stays: the one tensor is written.
//
// Nothing is written into m until the whole file has been read, its
// checksums verified and every tensor checked against m. The copy itself
// can fail only through the device (out of memory for the temporary of
// one parameter), and then the parameters before the failing one already
// hold the file's values. m's parameters must not be on a recording tape.
func LoadSafetensors(path string, m Module) error {
	return LoadSafetensorsWith(path, m, LoadOptions{})
}

// LoadOptions relax or tighten LoadSafetensors.
type LoadOptions struct {
	// ConvertFloats accepts F64, F16 and BF16 tensors for float32
	// parameters, converted on the host (F64 rounded to nearest; F16 and
	// BF16 exactly), e.g. a bfloat16 checkpoint from Hugging Face.
	ConvertFloats bool
	// CropRows names tensors (by the model's names) that may be longer
	// along their first axis in the file than in the model: the model
	// takes the first rows. nanoGPT's crop_block_size does this to a
	// GPT's position table (transformer.wpe.weight) to run it at a
	// shorter context.
	CropRows []string
	// RequireFinite refuses a file whose parameters hold a NaN or an
	// infinity (a diverged run's, or a crafted one), naming them, before
	// the model changes.
	RequireFinite bool
	// Index, when set (HFWeightMap), is the index the files are the
	// shards of: every tensor must be in the file it names, and every
	// tensor it names in one of the files.
	Index *HFIndex
}

// LoadSafetensorsWith is LoadSafetensors with options.
func LoadSafetensorsWith(path string, m Module, opts LoadOptions) error {
	return LoadSafetensorsFiles([]string{path}, m, opts)
}

// LoadSafetensorsFiles is LoadSafetensorsWith for a model whose tensors
// are spread over several files (a sharded checkpoint: HFWeightFiles
// lists them), read as one; a tensor in two files is an error.
func LoadSafetensorsFiles(paths []string, m Module, opts LoadOptions) error {
	return LoadSafetensorsContext(context.Background(), paths, m, opts)
}

// LoadSafetensorsContext is LoadSafetensorsFiles whose reads stop, with an
// error wrapping context.Cause(ctx), once ctx is done (a signal during a
// load); m is then left untouched. Each file may be at most a few times
// the model's float32 size (maxFileBytes), checked before it is read.
func LoadSafetensorsContext(ctx context.Context, paths []string, m Module, opts LoadOptions) error {
	if len(paths) == 0 {
		return fmt.Errorf("nn.LoadSafetensors: no files")
	}
	path := strings.Join(paths, ", ") // names the files in errors
	f := &safetensors.File{}
	from := map[string]string{}
	limit := maxFileBytes(m)
	for _, p := range paths {
		g, err := safetensors.ReadFileContext(ctx, p, limit)
		if err != nil {
			return fmt.Errorf("nn.LoadSafetensors: %w", err)
		}
		for _, st := range g.Tensors {
			if other, dup := from[st.Name]; dup {
				return fmt.Errorf("nn.LoadSafetensors: tensor %s is in both %s and %s", st.Name, other, p)
			}
			from[st.Name] = p
		}
		f.Tensors = append(f.Tensors, g.Tensors...)
	}
	if opts.Index != nil {
		if err := opts.Index.check(from); err != nil {
			return err
		}
	}
	ps := NamedParameters(m)
	model := make(map[string]*ferry.Tensor, len(ps))
	for _, p := range ps {
		if p.Name == "" || model[p.Name] != nil {
			return fmt.Errorf("nn.LoadSafetensors %s: the model has an unnamed or twice-named parameter %q; name parameters uniquely (implement nn.ParameterNamer)", path, p.Name)
		}
		model[p.Name] = p.Tensor
	}
	conv := detectConvention(f, model)
	f.Tensors = translate(f, conv)
	file := make(map[string]*safetensors.Tensor, len(f.Tensors))
	for i := range f.Tensors {
		file[f.Tensors[i].Name] = &f.Tensors[i]
	}
	// alias resolves a file's name to the model's, for tied weights.
	alias := func(name string) (string, bool) {
		target, ok := TiedAliases[name]
		if !ok || model[name] != nil || model[target] == nil {
			return "", false
		}
		return target, true
	}
	e := &LoadError{File: path, Convention: conv}
	source := make(map[string]*safetensors.Tensor, len(ps))
	for _, n := range ps {
		p := n.Tensor
		st := file[n.Name]
		if st == nil {
			for a := range TiedAliases {
				if t, ok := alias(a); ok && t == n.Name && file[a] != nil {
					st = file[a]
				}
			}
		}
		if st == nil {
			e.Missing = append(e.Missing, n.Name)
			continue
		}
		if p.DType() != device.Float32 {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s is %s in the model; ferry loads float32 parameters", n.Name, p.DType()))
		} else if st.DType != safetensors.F32 && !(opts.ConvertFloats && convertible(st.DType)) {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s is %s in the file, %s in the model", st.Name, st.DType, p.DType()))
		}
		if c, ok := cropRows(st, p.Shape(), opts.CropRows, n.Name); ok {
			st = c
		}
		if !slices.Equal(st.Shape, p.Shape()) {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s has shape %v in the file, %v in the model", st.Name, st.Shape, p.Shape()))
		}
		source[n.Name] = st
	}
	for _, st := range f.Tensors {
		if model[st.Name] != nil {
			continue
		}
		target, ok := alias(st.Name)
		if !ok {
			e.Unexpected = append(e.Unexpected, st.Name)
			continue
		}
		if other := file[target]; other != nil && (other.DType != st.DType || !slices.Equal(other.Shape, st.Shape) || !bytes.Equal(other.Data, st.Data)) {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s differs from %s, and the model ties them (one tensor)", st.Name, target))
		}
	}
	if len(e.Missing)+len(e.Unexpected)+len(e.Mismatched) > 0 {
		return e
	}
	if opts.RequireFinite {
		var bad []string
		for _, n := range ps {
			if st := source[n.Name]; st != nil {
				if k, first := nonFinite(st); k > 0 {
					bad = append(bad, fmt.Sprintf("%s (%d of %d values, e.g. %v)", st.Name, k, numel(st.Shape), first))
				}
			}
		}
		if len(bad) > 0 {
			if len(bad) > 5 {
				bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
			}
			return fmt.Errorf("nn.LoadSafetensors %s: %w: %s (the weights of a run that diverged, or a damaged file; load an earlier checkpoint)",
				path, ErrNonFinite, strings.Join(bad, ", "))
		}
	}
	err := ferry.Catch(func() error {
		for _, n := range ps {
			func() {
				tmp := upload(n.Tensor.Device(), source[n.Name], false)
				defer tmp.Release() // also when CopyFrom panics
				n.Tensor.CopyFrom(tmp)
			}()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nn.LoadSafetensors %s: copying into the model: %w", path, err)
	}
	return nil
}

// cropRows is st cut to its first want[0] rows, when name is among crop
// and st is longer than want along its first axis only.
func cropRows(st *safetensors.Tensor, want []int, crop []string, name string) (*safetensors.Tensor, bool) {
	if !slices.Contains(crop, name) || len(st.Shape) != len(want) || len(want) == 0 || st.Shape[0] <= want[0] || !slices.Equal(st.Shape[1:], want[1:]) {
		return nil, false
	}
	row := st.DType.Size()
	for _, d := range want[1:] {
		row *= d
	}
	if row == 0 || len(st.Data) != st.Shape[0]*row {
		return nil, false // the loader reports the bad data
	}
	c := *st
	c.Shape = slices.Clone(want)
	c.Data = st.Data[:want[0]*row]
	return &c, true
}

func convertible(d safetensors.DType) bool {
	return d == safetensors.F64 || d == safetensors.F16 || d == safetensors.BF16
}

func ferryDType(d safetensors.DType) (device.DType, bool) {
	switch d {
	case safetensors.F32:
		return device.Float32, true
	case safetensors.I32:
		return device.Int32, true
	case safetensors.U8:
		return device.Uint8, true
	case safetensors.BF16:
		return device.BFloat16, true
	case safetensors.F16:
		return device.Float32, true // widened: ferry has no float16 tensors
	}
	return 0, false
}

// upload makes a new tensor on dev holding st (I32 as int32; BF16 as
// bfloat16 when loadBF16, else as float32; F32, or a float dtype the
// caller has agreed to convert, as float32); it panics with a
// *ferry.Error on a device failure, for ferry.Catch.
func upload(dev device.Device, st *safetensors.Tensor, loadBF16 bool) *ferry.Tensor {
	shape := st.Shape
	if len(shape) == 0 { // a scalar: FromFloat32s reads no shape as a vector
		shape = []int{1}
	}
	var t *ferry.Tensor
	if st.DType == safetensors.U8 {
		t = ferry.FromUint8s(dev, device.Activation, st.Data, shape...)
	} else if st.DType == safetensors.I32 {
		v, err := st.Int32s()
		if err != nil {
			panic(&ferry.Error{Op: "load", Msg: err.Error()})
		}
		t = ferry.FromInt32s(dev, v, shape...)
	} else {
		v, err := st.Float32s()
		if err != nil {
			panic(&ferry.Error{Op: "load", Msg: err.Error()})
		}
		t = ferry.FromFloat32s(dev, v, shape...)
		if st.DType == safetensors.BF16 && loadBF16 {
			b := ferry.Cast(t, device.BFloat16) // exact: the values are bfloat16's
			t.Release()
			t = b
		}
	}
	if len(st.Shape) == 0 {
		s := t.Reshape()
		t.Release()
		t = s
	}
	return t
}

// bf16Tensor is a BF16 safetensors tensor of vals rounded to nearest even.
func bf16Tensor(name string, vals []float32, shape []int) safetensors.Tensor {
	data := make([]byte, 2*len(vals))
	for i, v := range vals {
		b := device.ToBFloat16(v)
		data[2*i], data[2*i+1] = byte(b), byte(b>>8)
	}
	return safetensors.Tensor{Name: name, DType: safetensors.BF16, Shape: slices.Clone(shape), Data: data}
}

// ErrNonFinite is wrapped by LoadSafetensors' error (LoadOptions.
// RequireFinite) for a file whose parameters hold a NaN or an infinity.
var ErrNonFinite = errors.New("the file holds values that are not finite (NaN or infinity)")

// maxFileBytes is the largest weights file LoadSafetensors reads for m:
// its parameters at 8 bytes each (F64, the widest float it converts),
// and 256 MiB for what a file may hold beside them (Hugging Face GPT-2's
// causal-mask buffers, a header) — so that a huge or sparse file named by
// mistake is refused by its size, before anything is read.
func maxFileBytes(m Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		n += int64(p.Numel())
	}
	return 8*n + 256<<20
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// nonFinite counts the NaN and infinite values of a float tensor (0 for
// other dtypes) and returns the first, read from the bits of its data.
func nonFinite(st *safetensors.Tensor) (n int, first float64) {
	d := st.Data
	note := func(v float64) {
		if n == 0 {
			first = v
		}
		n++
	}
	switch st.DType {
	case safetensors.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			if b := binary.LittleEndian.Uint32(d[i:]); b&0x7f800000 == 0x7f800000 {
				note(float64(math.Float32frombits(b)))
			}
		}
	case safetensors.F64:
		for i := 0; i+8 <= len(d); i += 8 {
			if b := binary.LittleEndian.Uint64(d[i:]); b&0x7ff0000000000000 == 0x7ff0000000000000 {
				note(math.Float64frombits(b))
			}
		}
	case safetensors.BF16:
		for i := 0; i+2 <= len(d); i += 2 {
			if b := binary.LittleEndian.Uint16(d[i:]); b&0x7f80 == 0x7f80 {
				note(float64(math.Float32frombits(uint32(b) << 16)))
			}
		}
	case safetensors.F16:
		for i := 0; i+2 <= len(d); i += 2 {
			if b := binary.LittleEndian.Uint16(d[i:]); b&0x7c00 == 0x7c00 {
				if b&0x3ff != 0 {
					note(math.NaN())
				} else if b&0x8000 != 0 {
					note(math.Inf(-1))
				} else {
					note(math.Inf(1))
				}
			}
		}
	}
	return n, first
}
