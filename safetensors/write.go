package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"ferry/internal/fsx"
)

// Encode writes tensors and metadata to w as a safetensors file, with a
// CRC-32C of every tensor under ChecksumKey in __metadata__ (so metadata
// must not use that key itself). Tensors are laid out as the reference
// implementation lays them out, by decreasing element size and then by
// name, after a header space-padded to a multiple of 8 bytes, so every
// tensor starts aligned to its element size. Names must be unique and
// non-empty, dtypes known, and each Data exactly its shape's size.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	h, order, err := header(tensors, metadata)
	if err != nil {
		return err
	}
	bw := &batchWriter{w: w, buf: make([]byte, 0, 1<<20)}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(h)))
	bw.write(lenBuf[:])
	bw.write(h)
	for _, t := range order {
		bw.write(t.Data)
	}
	return bw.flush()
}

// batchWriter gathers small writes into one (a file of many small
// tensors is then a few large writes) and passes large ones through. Its
// first error sticks: later writes do nothing and flush returns it.
type batchWriter struct {
	w   io.Writer
	buf []byte // pending bytes; len(buf) < cap(buf) between calls
	err error
}

func (b *batchWriter) write(p []byte) {
	if b.err != nil {
		return
	}
	if len(b.buf)+len(p) < cap(b.buf) {
		b.buf = append(b.buf, p...)
		return
	}
	if b.flush() == nil {
		_, b.err = b.w.Write(p)
	}
}

func (b *batchWriter) flush() error {
	if b.err == nil && len(b.buf) > 0 {
		_, b.err = b.w.Write(b.buf)
		b.buf = b.buf[:0]
	}
	return b.err
}

// WriteFile writes a safetensors file (see Encode) atomically: the file at
// path is either replaced whole or left as it was, and no temporary file
// is left behind on an error.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	if _, _, err := header(tensors, metadata); err != nil {
		err.(*Error).File = path
		return err
	}
	if err := fsx.WriteAtomic(path, func(w io.Writer) error { return Encode(w, tensors, metadata) }); err != nil {
		return &Error{File: path, Msg: "cannot write", Err: unwrapPath(err)}
	}
	return nil
}

// header validates tensors and metadata and returns the padded header and
// the tensors in file order.
func header(tensors []Tensor, metadata map[string]string) ([]byte, []*Tensor, error) {
	order := make([]*Tensor, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "" || t.Name == "__metadata__":
			return nil, nil, &Error{Tensor: t.Name, Msg: "reserved or empty tensor name"}
		case !utf8.ValidString(t.Name):
			return nil, nil, &Error{Tensor: t.Name, Msg: "name is not valid UTF-8"}
		case seen[t.Name]:
			return nil, nil, &Error{Tensor: t.Name, Msg: "given twice"}
		case !t.DType.Known():
			return nil, nil, &Error{Tensor: t.Name, Msg: fmt.Sprintf("unknown dtype %q", t.DType)}
		}
		seen[t.Name] = true
		size, ok := shapeBytes(t.Shape, t.DType.Size())
		if !ok {
			return nil, nil, &Error{Tensor: t.Name, Msg: fmt.Sprintf("bad shape %v", t.Shape)}
		}
		if size != uint64(len(t.Data)) {
			return nil, nil, &Error{Tensor: t.Name, Msg: fmt.Sprintf("%d bytes of data for shape %v of %s (%d bytes)", len(t.Data), t.Shape, t.DType, size)}
		}
		order[i] = t
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.DType.Size() != b.DType.Size() {
			return a.DType.Size() > b.DType.Size()
		}
		return a.Name < b.Name
	})
	md := make(map[string]string, len(metadata)+1)
	for k, v := range metadata {
		if k == ChecksumKey {
			return nil, nil, &Error{Msg: "metadata key " + ChecksumKey + " is reserved for the writer's checksums"}
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, &Error{Msg: fmt.Sprintf("metadata %q is not valid UTF-8", k)}
		}
		md[k] = v
	}
	sums := make(map[string]string, len(order))
	for _, t := range order {
		sums[t.Name] = fmt.Sprintf("%08x", Checksum(t.Data))
	}
	js, _ := json.Marshal(sums) // string maps always marshal
	md[ChecksumKey] = string(js)

	var b strings.Builder
	mdJSON, _ := json.Marshal(md)
	b.WriteString(`{"__metadata__":`)
	b.Write(mdJSON)
	var off uint64
	for _, t := range order {
		name, _ := json.Marshal(t.Name)
		shape, _ := json.Marshal(append([]int{}, t.Shape...)) // [] rather than null
		end := off + uint64(len(t.Data))
		fmt.Fprintf(&b, `,%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, name, t.DType, shape, off, end)
		off = end
	}
	b.WriteString("}")
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderBytes {
		return nil, nil, &Error{Msg: fmt.Sprintf("header of %d bytes is over the %d-byte limit readers accept", b.Len(), MaxHeaderBytes)}
	}
	return []byte(b.String()), order, nil
}
