package train

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"ferry"
	"ferry/device"
)

// Text is a byte-level corpus split into training and held-out text.
type Text struct {
	Train, Val []byte
	Source     string // what was read, for people
}

// DefaultTextSource is the Go distribution's own sources, on every machine
// that has Go.
func DefaultTextSource() string {
	root := runtime.GOROOT()
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		root = strings.TrimSpace(string(out))
	}
	return filepath.Join(root, "src")
}

// LoadText reads at most limit bytes of text from path: a file, or the
// source and text files under a directory (.go, .txt, .md, .c, .h, .py,
// .s; testdata and hidden directories skipped) in path order. Of the Go
// tree (path "" or DefaultTextSource) it reads every 7th file, so that a
// limited read spans many packages. The last valFraction is held out.
func LoadText(path string, limit int, valFraction float64) (*Text, error) {
	if path == "" {
		path = DefaultTextSource()
	}
	if limit < 1 {
		return nil, fmt.Errorf("text limit must be positive, got %d", limit)
	}
	if !(valFraction > 0 && valFraction < 1) {
		return nil, fmt.Errorf("validation fraction must be in (0, 1), got %v", valFraction)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("text: %w", err)
	}
	var text []byte
	source := path
	if !st.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("text: %w", err)
		}
		defer f.Close()
		if text, err = io.ReadAll(io.LimitReader(f, int64(limit))); err != nil {
			return nil, fmt.Errorf("text: reading %s: %w", path, err)
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
		stride := 1
		if path == DefaultTextSource() {
			stride = 7 // the Go tree is large: sample it across packages
		}
		for i := 0; i < len(files) && len(text) < limit; i += stride {
			b, err := os.ReadFile(files[i])
			if err != nil {
				continue
			}
			text = append(text, b...)
		}
		if len(text) > limit {
			text = text[:limit]
		}
		source = fmt.Sprintf("%s (%d text files)", path, len(files))
	}
	split := int(float64(len(text)) * (1 - valFraction))
	return &Text{Train: text[:split], Val: text[split:], Source: source}, nil
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

// Batch draws n random windows of seq+1 bytes from text and returns the
// inputs and the next-byte targets, both int32 [n, seq] on dev.
func Batch(dev device.Device, text []byte, rng *rand.Rand, n, seq int) (x, y *ferry.Tensor) {
	xs, ys := make([]int32, n*seq), make([]int32, n*seq)
	for b := 0; b < n; b++ {
		at := rng.IntN(len(text) - seq)
		for i := 0; i < seq; i++ {
			xs[b*seq+i], ys[b*seq+i] = int32(text[at+i]), int32(text[at+i+1])
		}
	}
	return ferry.FromInt32s(dev, xs, n, seq), ferry.FromInt32s(dev, ys, n, seq)
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
