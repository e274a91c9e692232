package digest

// The FNV-1a 64-bit offset basis and prime (hash/fnv's).
const (
	fnv64Offset = 14695981039346656037
	fnv64Prime  = 1099511628211
)

// FNV64a is a 64-bit FNV-1a hash of the bytes written to it, the value
// hash/fnv's New64a gives: each byte is xored into the state, which is
// then multiplied by the FNV prime. NewFNV64a makes one ready; the zero
// value is not. It is an io.Writer.
type FNV64a struct {
	h uint64
}

// NewFNV64a returns an FNV64a with nothing written.
func NewFNV64a() *FNV64a { return &FNV64a{h: fnv64Offset} }

// Reset forgets everything written.
func (f *FNV64a) Reset() { f.h = fnv64Offset }

// Write adds p to the hash. It always returns len(p), nil.
func (f *FNV64a) Write(p []byte) (int, error) {
	h := f.h
	for _, c := range p {
		h ^= uint64(c)
		h *= fnv64Prime
	}
	f.h = h
	return len(p), nil
}

// Sum64 returns the hash of what was written so far.
func (f *FNV64a) Sum64() uint64 { return f.h }
