// Package text is byte-level text for language models: a corpus read from
// a file or a directory of source files, split into training and held-out
// bytes, and random windows of it as token batches. It knows nothing of
// models or of the training loop.
package text

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"

	"ferry"
	"ferry/device"
	"ferry/internal/fsx"
)

// Text is a byte-level corpus split into training and held-out text.
type Text struct {
	Train, Val []byte
	Source     string // what was read, for people
}

// Options say how much of a corpus to read and how to split it.
type Options struct {
	// Limit is the most bytes read.
	Limit int
	// ValFraction is the share held out for validation, in (0, 1).
	ValFraction float64
	// Stride reads every Stride-th file of a directory (0 or 1: every
	// file), so that a limited read of a large tree spans all of it.
	Stride int
}

// Load reads at most o.Limit bytes of text from path: a regular file, or
// the source and text files under a directory (.go, .txt, .md, .c, .h,
// .py, .s; testdata and hidden directories skipped) in path order. The
// last o.ValFraction is held out. Special files (pipes, devices) are
// refused before they are opened, and so is text that is mostly NUL
// bytes (/dev/zero's or a sparse file's).
func Load(path string, o Options) (*Text, error) {
	return LoadContext(context.Background(), path, o)
}

// LoadContext is Load whose reads stop, with an error wrapping
// context.Cause(ctx), once ctx is done. Every file is read through
// fsx.Open.
func LoadContext(ctx context.Context, path string, o Options) (*Text, error) {
	limit, valFraction := o.Limit, o.ValFraction
	if path == "" {
		return nil, fmt.Errorf("text: no path given")
	}
	if limit < 1 {
		return nil, fmt.Errorf("text limit must be positive, got %d", limit)
	}
	if !(valFraction > 0 && valFraction < 1) {
		return nil, fmt.Errorf("validation fraction must be in (0, 1), got %v", valFraction)
	}
	st, err := fsx.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("text: %w", err)
	}
	var text []byte
	source := path
	if !st.IsDir() && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("text: %s is %s, not a regular file or a directory; give a text file or a directory of them", path, fsx.Kind(st.Mode()))
	}
	if !st.IsDir() {
		if text, err = readPrefix(ctx, path, limit); err != nil { // of a larger file, a prefix
			return nil, fmt.Errorf("text: %w", err)
		}
	} else {
		var files []string
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == path {
					return err
				}
				return nil // an unreadable subdirectory is skipped
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != path {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() && textFile(d.Name()) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("text: %w", err)
		}
		sort.Strings(files)
		stride := max(1, o.Stride)
		for i := 0; i < len(files) && len(text) < limit; i += stride {
			b, err := readPrefix(ctx, files[i], limit-len(text))
			if ctx.Err() != nil {
				return nil, fmt.Errorf("text: %w", err)
			}
			if err != nil {
				continue // unreadable, or replaced by a special file: skipped
			}
			text = append(text, b...)
		}
		if len(text) > limit {
			text = text[:limit]
		}
		source = fmt.Sprintf("%s (%d text files)", path, len(files))
	}
	if len(text) == 0 {
		return nil, fmt.Errorf("text: %s holds no text", source)
	}
	if zeros := bytes.Count(text, []byte{0}); zeros > len(text)/2 {
		return nil, fmt.Errorf("text: %s is %d%% NUL bytes (a sparse or binary file?); give text", source, 100*zeros/len(text))
	}
	split := int(float64(len(text)) * (1 - valFraction))
	return &Text{Train: text[:split], Val: text[split:], Source: source}, nil
}

// readPrefix reads at most n bytes of the regular file at path.
func readPrefix(ctx context.Context, path string, n int) ([]byte, error) {
	f, err := fsx.Open(ctx, path, -1)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(n)))
}

func textFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".go", ".txt", ".md", ".c", ".h", ".py", ".s":
		return true
	}
	return false
}

// Check says whether the text can give sequences of length seq.
func (t *Text) Check(seq int) error {
	const minSeqs = 4
	if len(t.Train) < minSeqs*(seq+1) || len(t.Val) < seq+1 {
		return fmt.Errorf("%s: %d bytes of training text and %d held out are too little for sequences of %d bytes "+
			"(give more text, or a smaller --seq)", t.Source, len(t.Train), len(t.Val), seq)
	}
	return nil
}

// Token is what a corpus holds: bytes (a byte-level corpus) or token ids
// (a tokenized one, such as GPT-2's BPE ids).
type Token interface{ ~byte | ~int32 }

// Batch draws n random windows of seq+1 tokens from text and returns the
// inputs and the next-token targets, both int32 [n, seq] on dev.
func Batch[T Token](dev device.Device, text []T, rng *rand.Rand, n, seq int) (x, y *ferry.Tensor) {
	xs, ys := Windows(text, rng, n, seq)
	return ferry.FromInt32s(dev, xs, n, seq), ferry.FromInt32s(dev, ys, n, seq)
}

// Windows draws what Batch does, as row-major [n, seq] token ids: row b of
// a draw of n rows is the same whatever part of them is kept.
func Windows[T Token](text []T, rng *rand.Rand, n, seq int) (xs, ys []int32) {
	xs, ys = make([]int32, n*seq), make([]int32, n*seq)
	for b := 0; b < n; b++ {
		at := rng.IntN(len(text) - seq)
		for i := 0; i < seq; i++ {
			xs[b*seq+i], ys[b*seq+i] = int32(text[at+i]), int32(text[at+i+1])
		}
	}
	return xs, ys
}

// UnigramEntropy is the entropy of b's byte distribution in nats: the loss
// of a model that ignores context.
func UnigramEntropy(b []byte) float64 {
	var counts [256]float64
	for _, c := range b {
		counts[c]++
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := c / float64(len(b))
			h -= p * math.Log(p)
		}
	}
	return h
}

// TokenEntropy is the entropy of ids' distribution in nats per token: the
// loss of a model over those tokens that ignores context.
func TokenEntropy(ids []int32) float64 {
	counts := map[int32]float64{}
	for _, id := range ids {
		counts[id]++
	}
	var h float64
	for _, c := range counts {
		p := c / float64(len(ids))
		h -= p * math.Log(p)
	}
	return h
}
