package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"ferry/internal/digest"
	"ferry/internal/fsx"
)

// MaxHeaderBytes is the largest header a reader accepts, as in the
// reference implementation (100 MB): a length field beyond it means the
// file is not a safetensors file, and nothing that large is allocated.
const MaxHeaderBytes = 100_000_000

// DefaultLimit is the largest file ReadFile reads when its limit is 0.
const DefaultLimit int64 = 64 << 30

// ChecksumKey is the __metadata__ key under which ferry stores a CRC-32C
// (Castagnoli) of each tensor's bytes: its value is a JSON object mapping
// every tensor's name to 8 lowercase hex digits, e.g.
//
//	"ferry.crc32c": "{\"0.bias\":\"1c2a9e07\",\"0.weight\":\"…\"}"
//
// (the format allows only strings as metadata values, hence JSON in a
// string). One key rather than one per tensor keeps the user's metadata
// namespace clean and lets a reader tell "no checksums" (a file from
// PyTorch) from "a checksum is missing" (a damaged header).
const ChecksumKey = "ferry.crc32c"

// Checksum is the CRC-32C (Castagnoli) of b, as ChecksumKey records it.
func Checksum(b []byte) uint32 { return digest.CRC32C(b) }

// Error is what a reader or writer returns for a file it refuses: which
// file, which tensor (if one), and what is wrong.
type Error struct {
	File   string // the path, or the name given to Parse
	Tensor string // the tensor at fault, if one is
	Msg    string // "" when Err says it all, the file included
	Err    error  // an underlying error (I/O), if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.Msg == "" && e.Err != nil { // Err names the file itself (fsx.Open's)
		b.WriteString(e.Err.Error())
		return b.String()
	}
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// File is a parsed safetensors file.
type File struct {
	// Tensors in the order of their data in the file.
	Tensors []Tensor
	// Metadata is the header's __metadata__, without ChecksumKey (nil
	// when the file has none).
	Metadata map[string]string
	// Checksummed says the file carried ChecksumKey and every tensor's
	// bytes matched it.
	Checksummed bool
}

// Tensor returns the tensor named name, or nil.
func (f *File) Tensor(name string) *Tensor {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i]
		}
	}
	return nil
}

// ReadFile reads and parses the safetensors file at path, refusing a file
// larger than limit bytes (DefaultLimit when limit is 0): ReadFileContext
// without a context.
func ReadFile(path string, limit int64) (*File, error) {
	return ReadFileContext(context.Background(), path, limit)
}

// ReadFileContext reads and parses the safetensors file at path, refusing
// a file larger than limit bytes (DefaultLimit when limit is 0). Anything
// but a regular file (a FIFO, a device, a directory, a link that loops)
// is refused before it is read (fsx.Open). Of the file it reads the
// header, checks it whole against the file's size, and only then reads
// the data, in one buffer of exactly the size the header describes: a
// hostile length field or offset allocates nothing, and a foreign file is
// refused after reading at most its header. The read stops, with an error
// wrapping context.Cause(ctx), once ctx is done. Errors are *Error naming
// path.
func ReadFileContext(ctx context.Context, path string, limit int64) (*File, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	f, err := fsx.Open(ctx, path, -1)
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	defer f.Close()
	// readErr is a failed read's error: a cancelled one's says only that
	// (the error names the file).
	readErr := func(msg string, err error) error {
		if ctx.Err() != nil {
			return &Error{File: path, Err: err}
		}
		return &Error{File: path, Msg: msg, Err: err}
	}
	size := f.Size()
	if size > limit {
		return nil, &Error{File: path, Msg: fmt.Sprintf("is %d bytes, over the %d-byte limit", size, limit)}
	}
	var lenBuf [8]byte
	if size < 8 {
		return nil, &Error{File: path, Msg: fmt.Sprintf("is %d bytes, too short for the 8-byte header length (empty or truncated)", size)}
	}
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, readErr("cannot read the header length", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if err := checkHeaderLen(n, size); err != nil {
		err.File = path
		return nil, err
	}
	// The header first: a damaged or foreign file is refused before its
	// data (up to limit bytes) is read.
	h := make([]byte, n)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, readErr("cannot read the header (did the file shrink?)", err)
	}
	file, infos, herr := parseHeader(h, uint64(size)-8-n)
	if herr != nil {
		herr.File = path
		return nil, herr
	}
	data := make([]byte, uint64(size)-8-n)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, readErr("cannot read the data (did the file shrink?)", err)
	}
	if herr := attach(file, infos, data); herr != nil {
		herr.File = path
		return nil, herr
	}
	return file, nil
}

// unwrapPath drops the *PathError wrapper, whose path Error already names.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

func checkHeaderLen(n uint64, size int64) *Error {
	switch {
	case n > MaxHeaderBytes:
		return &Error{Msg: fmt.Sprintf("header length %d is over the %d-byte limit (not a safetensors file?)", n, MaxHeaderBytes)}
	case n > uint64(size-8):
		return &Error{Msg: fmt.Sprintf("header length %d runs past the end of the %d-byte file (truncated, or not a safetensors file)", n, size)}
	case n < 2:
		return &Error{Msg: fmt.Sprintf("header length %d cannot hold a JSON object", n)}
	}
	return nil
}

// Parse parses a whole safetensors file held in b; name is used in
// errors. The returned tensors' Data alias b.
//
// Parse is strict: it refuses a header that is not one JSON object of
// valid UTF-8 (trailing spaces allowed), a key given twice (at any level),
// an entry with missing or extra fields, an unknown dtype, a dimension
// that is negative or not an integer, a shape whose byte size overflows or
// differs from its data_offsets, offsets out of order, overlapping,
// leaving gaps or not covering the data buffer exactly, a __metadata__
// value that is not a string, and, when ChecksumKey is present, any tensor
// whose CRC-32C differs or is not recorded. It never panics.
func Parse(name string, b []byte) (*File, error) {
	f, err := parse(b)
	if err != nil {
		err.File = name
		return nil, err
	}
	return f, nil
}

type info struct {
	name       string
	dtype      DType
	shape      []int
	begin, end uint64
}

func parse(b []byte) (*File, *Error) {
	if len(b) < 8 {
		return nil, &Error{Msg: fmt.Sprintf("%d bytes, too short for the 8-byte header length (empty or truncated)", len(b))}
	}
	n := binary.LittleEndian.Uint64(b)
	if err := checkHeaderLen(n, int64(len(b))); err != nil {
		return nil, err
	}
	h, data := b[8:8+n], b[8+n:]
	f, infos, err := parseHeader(h, uint64(len(data)))
	if err != nil {
		return nil, err
	}
	return f, attach(f, infos, data)
}

// parseHeader checks a header against a data buffer of dataLen bytes and
// returns the file (metadata only, checksums not yet checked) and the
// tensors' places in data order.
func parseHeader(h []byte, dataLen uint64) (*File, []info, *Error) {
	if h[0] != '{' {
		return nil, nil, &Error{Msg: fmt.Sprintf("header starts with %q, not '{' (not a safetensors file?)", h[0])}
	}
	if !utf8.Valid(h) {
		return nil, nil, &Error{Msg: "header is not valid UTF-8"}
	}
	if !json.Valid(h) {
		var v any
		err := json.Unmarshal(h, &v)
		return nil, nil, &Error{Msg: "header is not valid JSON", Err: err}
	}
	entries, err := objectEntries(h)
	if err != nil {
		return nil, nil, &Error{Msg: "header: " + err.Error()}
	}
	f := &File{}
	var infos []info
	for _, e := range entries {
		if e.key == "__metadata__" {
			md, err := stringObject(e.raw)
			if err != nil {
				return nil, nil, &Error{Msg: "__metadata__: " + err.Error()}
			}
			f.Metadata = md
			continue
		}
		in, err := parseInfo(e.key, e.raw)
		if err != nil {
			return nil, nil, &Error{Tensor: e.key, Msg: err.Error()}
		}
		infos = append(infos, in)
	}
	sort.Slice(infos, func(i, j int) bool {
		a, b := infos[i], infos[j]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		if a.end != b.end {
			return a.end < b.end
		}
		return a.name < b.name
	})
	var pos uint64
	prev := ""
	for _, in := range infos {
		switch {
		case in.end > dataLen:
			return nil, nil, &Error{Tensor: in.name, Msg: fmt.Sprintf("data_offsets [%d, %d] run past the %d-byte data buffer (truncated?)", in.begin, in.end, dataLen)}
		case in.begin < pos:
			return nil, nil, &Error{Tensor: in.name, Msg: fmt.Sprintf("data_offsets [%d, %d] overlap tensor %q, which ends at %d", in.begin, in.end, prev, pos)}
		case in.begin > pos:
			return nil, nil, &Error{Tensor: in.name, Msg: fmt.Sprintf("data_offsets [%d, %d] leave %d bytes unused before it", in.begin, in.end, in.begin-pos)}
		}
		pos, prev = in.end, in.name
	}
	if pos != dataLen {
		return nil, nil, &Error{Msg: fmt.Sprintf("%d bytes of data after the last tensor (the header describes %d of %d)", dataLen-pos, pos, dataLen)}
	}
	return f, infos, nil
}

// attach points f's tensors into data (checked by parseHeader) and
// verifies the checksums, if any.
func attach(f *File, infos []info, data []byte) *Error {
	f.Tensors = make([]Tensor, 0, len(infos))
	for _, in := range infos {
		f.Tensors = append(f.Tensors, Tensor{Name: in.name, DType: in.dtype, Shape: in.shape, Data: data[in.begin:in.end:in.end]})
	}
	if sums, ok := f.Metadata[ChecksumKey]; ok {
		if err := verify(f, sums); err != nil {
			return err
		}
		delete(f.Metadata, ChecksumKey)
		f.Checksummed = true
	}
	return nil
}

func verify(f *File, sums string) *Error {
	if !utf8.ValidString(sums) || !json.Valid([]byte(sums)) {
		return &Error{Msg: ChecksumKey + " is not a JSON object"}
	}
	want, err := stringObject([]byte(sums))
	if err != nil {
		return &Error{Msg: ChecksumKey + ": " + err.Error()}
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		s, ok := want[t.Name]
		if !ok {
			return &Error{Tensor: t.Name, Msg: "no checksum recorded in " + ChecksumKey + " (damaged header?)"}
		}
		w, err := strconv.ParseUint(s, 16, 32)
		if err != nil || len(s) != 8 {
			return &Error{Tensor: t.Name, Msg: fmt.Sprintf("checksum %q is not 8 hex digits", s)}
		}
		if got := Checksum(t.Data); got != uint32(w) {
			return &Error{Tensor: t.Name, Msg: fmt.Sprintf("data has CRC-32C %08x, the header records %s: the file is corrupted", got, s)}
		}
		delete(want, t.Name)
	}
	for n := range want {
		return &Error{Msg: fmt.Sprintf("%s names tensor %q, which the file does not hold", ChecksumKey, n)}
	}
	return nil
}

type entry struct {
	key string
	raw json.RawMessage
}

// objectEntries splits a JSON object (already known to be valid JSON)
// into its entries in order, refusing a key given twice: encoding/json
// would silently keep the last.
func objectEntries(raw []byte) ([]entry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("is not a JSON object")
	}
	seen := map[string]bool{}
	var out []entry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		out = append(out, entry{key, v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	return out, nil
}

// stringObject decodes a JSON object whose values are all strings.
func stringObject(raw []byte) (map[string]string, error) {
	es, err := objectEntries(raw)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(es))
	for _, e := range es {
		var s string
		if len(e.raw) == 0 || e.raw[0] != '"' || json.Unmarshal(e.raw, &s) != nil {
			return nil, fmt.Errorf("value of %q is %s, not a string", e.key, clip(e.raw))
		}
		m[e.key] = s
	}
	return m, nil
}

func parseInfo(name string, raw []byte) (info, error) {
	in := info{name: name}
	if name == "" {
		return in, fmt.Errorf("a tensor has an empty name")
	}
	es, err := objectEntries(raw)
	if err != nil {
		return in, fmt.Errorf("entry %s: %w", clip(raw), err)
	}
	var haveDType, haveShape, haveOffsets bool
	for _, e := range es {
		switch e.key {
		case "dtype":
			var s string
			if len(e.raw) == 0 || e.raw[0] != '"' || json.Unmarshal(e.raw, &s) != nil {
				return in, fmt.Errorf("dtype %s is not a string", clip(e.raw))
			}
			in.dtype, haveDType = DType(s), true
			if !in.dtype.Known() {
				return in, fmt.Errorf("unknown dtype %q", s)
			}
		case "shape":
			var dims []json.RawMessage
			if len(e.raw) == 0 || e.raw[0] != '[' || json.Unmarshal(e.raw, &dims) != nil {
				return in, fmt.Errorf("shape %s is not an array", clip(e.raw))
			}
			in.shape, haveShape = make([]int, len(dims)), true
			for i, d := range dims {
				v, err := strconv.ParseInt(string(d), 10, 64)
				switch {
				case err != nil:
					return in, fmt.Errorf("shape %s: dimension %s is not an integer in range", clip(e.raw), clip(d))
				case v < 0:
					return in, fmt.Errorf("shape %s: negative dimension %d", clip(e.raw), v)
				case v > math.MaxInt:
					return in, fmt.Errorf("shape %s: dimension %d too large", clip(e.raw), v)
				}
				in.shape[i] = int(v)
			}
		case "data_offsets":
			var offs []json.RawMessage
			if len(e.raw) == 0 || e.raw[0] != '[' || json.Unmarshal(e.raw, &offs) != nil || len(offs) != 2 {
				return in, fmt.Errorf("data_offsets %s is not an array of two integers", clip(e.raw))
			}
			var v [2]uint64
			for i, o := range offs {
				if v[i], err = strconv.ParseUint(string(o), 10, 64); err != nil {
					return in, fmt.Errorf("data_offsets %s: %s is not a non-negative integer in range", clip(e.raw), clip(o))
				}
			}
			if v[0] > v[1] {
				return in, fmt.Errorf("data_offsets [%d, %d] end before they begin", v[0], v[1])
			}
			in.begin, in.end, haveOffsets = v[0], v[1], true
		default:
			return in, fmt.Errorf("unknown field %q (want dtype, shape, data_offsets)", e.key)
		}
	}
	switch {
	case !haveDType:
		return in, fmt.Errorf("no dtype")
	case !haveShape:
		return in, fmt.Errorf("no shape")
	case !haveOffsets:
		return in, fmt.Errorf("no data_offsets")
	}
	size, ok := shapeBytes(in.shape, in.dtype.Size())
	if !ok {
		return in, fmt.Errorf("shape %v of %s overflows", in.shape, in.dtype)
	}
	if size != in.end-in.begin {
		return in, fmt.Errorf("shape %v of %s is %d bytes, but data_offsets [%d, %d] span %d", in.shape, in.dtype, size, in.begin, in.end, in.end-in.begin)
	}
	return in, nil
}

// shapeBytes is the byte size of shape with elements of elem bytes, and
// false when it overflows an int.
func shapeBytes(shape []int, elem int) (uint64, bool) {
	n := uint64(elem)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// clip shortens a piece of hostile JSON for an error message.
func clip(b []byte) string {
	const max = 40
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
