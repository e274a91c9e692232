package dist

import "fmt"

// Bytes over a float32 communicator: what ranks exchange besides tensors
// (a digest of their settings, a directory's name). Each float32 carries
// two bytes as an integer 0..65535, which every float32 holds exactly and
// no backend alters in a copy (a byte pattern stored as raw float bits
// could be a signalling NaN). A length travels as an integer too, so it
// is below 2^24 (MaxBytes).

// MaxBytes is the longest byte string AllGatherBytes and BroadcastBytes
// move: lengths travel as float32 integers, exact below 2^24.
const MaxBytes = 1<<24 - 1

// AllGatherBytes gives every rank every rank's b, in rank order. Every
// rank must call it; each b may have its own length. It makes two
// collectives (the lengths, then the bytes padded to the longest).
func AllGatherBytes(c Comm, b []byte) ([][]byte, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("dist: all_gather of %d bytes: at most %d", len(b), MaxBytes)
	}
	n := c.Size()
	lens := make([]float32, n)
	if err := c.AllGather([]float32{float32(len(b))}, lens).Synchronize(); err != nil {
		return nil, err
	}
	longest := 0
	for _, l := range lens {
		longest = max(longest, int(l))
	}
	words := (longest + 1) / 2
	all := make([]float32, n*words)
	if err := c.AllGather(packBytes(b, words), all).Synchronize(); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range out {
		out[r] = unpackBytes(all[r*words:(r+1)*words], int(lens[r]))
	}
	return out, nil
}

// BroadcastBytes returns root's b on every rank (b is ignored elsewhere).
// Every rank must call it, with the same root.
func BroadcastBytes(c Comm, b []byte, root int) ([]byte, error) {
	if err := CheckRoot(root, c.Size()); err != nil {
		return nil, err
	}
	if c.Rank() == root && len(b) > MaxBytes {
		// The others are about to wait for a length: send one they can
		// see is wrong, so that every rank fails instead of hanging.
		c.Broadcast([]float32{-1}, root).Synchronize()
		return nil, fmt.Errorf("dist: broadcast of %d bytes: at most %d", len(b), MaxBytes)
	}
	l := []float32{float32(len(b))}
	if err := c.Broadcast(l, root).Synchronize(); err != nil {
		return nil, err
	}
	if l[0] < 0 {
		return nil, fmt.Errorf("dist: broadcast from rank %d: its bytes were longer than %d", root, MaxBytes)
	}
	words := make([]float32, (int(l[0])+1)/2)
	if c.Rank() == root {
		words = packBytes(b, len(words))
	}
	if err := c.Broadcast(words, root).Synchronize(); err != nil {
		return nil, err
	}
	return unpackBytes(words, int(l[0])), nil
}

// packBytes puts b into words float32s, two bytes each, zero-padded.
func packBytes(b []byte, words int) []float32 {
	w := make([]float32, words)
	for i, x := range b {
		if i%2 == 0 {
			w[i/2] += float32(int(x) << 8)
		} else {
			w[i/2] += float32(x)
		}
	}
	return w
}

// unpackBytes is the first n bytes packBytes put into w.
func unpackBytes(w []float32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		v := int(w[i/2])
		if i%2 == 0 {
			b[i] = byte(v >> 8)
		} else {
			b[i] = byte(v)
		}
	}
	return b
}
