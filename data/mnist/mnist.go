// Package mnist reads the MNIST handwritten digits from their four IDX
// files (gzipped, as LeCun's site and the GoMNIST module ship them) and
// makes batches of them. It knows nothing of models or of the training
// loop, and it looks for files only where it is told to.
//
// The reader trusts nothing in a file: the counts and sizes in each header
// are checked against fixed bounds before anything is allocated, and the
// data must be as long as the header says, so a damaged or hostile file
// is an error, never a panic or an allocation of its claimed size.
package mnist

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"ferry"
	"ferry/device"
	"ferry/internal/fsx"
)

// Files are the four files a directory must hold.
var Files = []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}

// Mean and Std are MNIST's pixel mean and standard deviation over the
// training set, the normalisation every PyTorch MNIST example uses.
const Mean, Std = 0.1307, 0.3081

// Bounds a header must respect: MNIST's own files hold 60,000 and 10,000
// images of 28×28.
const (
	maxImages = 1 << 20
	maxSide   = 1 << 10
	// maxFileBytes bounds a gzipped file (MNIST's largest is 9.9 MB), so
	// that a huge or sparse file named by mistake is refused unread.
	maxFileBytes = 4 << 30
)

// Set is the data set in memory: images normalised to float32, row-major
// [n, Rows*Cols], and labels 0–9.
type Set struct {
	Rows, Cols              int
	TrainImages, TestImages []float32
	TrainLabels, TestLabels []int32
	Dir                     string
}

// TrainCount and TestCount are the numbers of examples.
func (m *Set) TrainCount() int { return len(m.TrainLabels) }
func (m *Set) TestCount() int  { return len(m.TestLabels) }

// Pixels is the size of one image.
func (m *Set) Pixels() int { return m.Rows * m.Cols }

// CheckDir reports which of Files d lacks (or holds as something other
// than a regular file).
func CheckDir(d string) error {
	var missing []string
	for _, f := range Files {
		if st, err := os.Stat(filepath.Join(d, f)); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s", d, strings.Join(missing, ", "))
	}
	return nil
}

// Load reads the four files from dir.
func Load(dir string) (*Set, error) {
	if dir == "" {
		return nil, fmt.Errorf("MNIST: no directory given")
	}
	if err := CheckDir(dir); err != nil {
		return nil, fmt.Errorf("MNIST: %w", err)
	}
	m := &Set{Dir: dir}
	var errs []error
	var tr, te images
	var trl, tel []byte
	var err error
	if tr, err = readImages(filepath.Join(dir, Files[0])); err != nil {
		errs = append(errs, err)
	}
	if trl, err = readLabels(filepath.Join(dir, Files[1])); err != nil {
		errs = append(errs, err)
	}
	if te, err = readImages(filepath.Join(dir, Files[2])); err != nil {
		errs = append(errs, err)
	}
	if tel, err = readLabels(filepath.Join(dir, Files[3])); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("MNIST: %w", err)
	}
	if tr.rows != te.rows || tr.cols != te.cols {
		return nil, fmt.Errorf("MNIST: %s: training images are %d×%d, test images %d×%d", dir, tr.rows, tr.cols, te.rows, te.cols)
	}
	m.Rows, m.Cols = tr.rows, tr.cols
	if m.TrainImages, m.TrainLabels, err = normalise(tr, trl); err != nil {
		errs = append(errs, fmt.Errorf("training set: %w", err))
	}
	if m.TestImages, m.TestLabels, err = normalise(te, tel); err != nil {
		errs = append(errs, fmt.Errorf("test set: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("MNIST: %s: %w", dir, err)
	}
	return m, nil
}

type images struct {
	n, rows, cols int
	pixels        []byte
}

// openIDX opens a gzipped IDX file and checks its magic number: 0x00000801
// for labels (one dimension), 0x00000803 for images (three).
func openIDX(path string, magic uint32) (io.Reader, func() error, error) {
	f, err := fsx.Open(context.Background(), path, maxFileBytes)
	if err != nil {
		return nil, nil, err
	}
	z, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a gzip file: %w", path, err)
	}
	var got uint32
	if err := binary.Read(z, binary.BigEndian, &got); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if got != magic {
		f.Close()
		return nil, nil, fmt.Errorf("%s: magic number %#08x, want %#08x (an IDX file of MNIST)", path, got, magic)
	}
	return z, f.Close, nil
}

// readExactly reads n bytes, growing its buffer as data arrives, so that
// a header claiming more than the file holds allocates no more than the
// file has.
func readExactly(path string, r io.Reader, n int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(n)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) != n {
		if len(b) > n {
			return nil, fmt.Errorf("%s: more data than its header says (%d bytes)", path, n)
		}
		return nil, fmt.Errorf("%s: %d bytes of data, and its header says %d (a truncated file?)", path, len(b), n)
	}
	return b, nil
}

func readImages(path string) (images, error) {
	r, closeFile, err := openIDX(path, 0x803)
	if err != nil {
		return images{}, err
	}
	defer closeFile()
	var dims [3]uint32
	if err := binary.Read(r, binary.BigEndian, &dims); err != nil {
		return images{}, fmt.Errorf("%s: header: %w", path, err)
	}
	if dims[0] < 1 || dims[0] > maxImages || dims[1] < 1 || dims[1] > maxSide || dims[2] < 1 || dims[2] > maxSide {
		return images{}, fmt.Errorf("%s: header says %d images of %d×%d; want 1 to %d images of at most %d×%d",
			path, dims[0], dims[1], dims[2], maxImages, maxSide, maxSide)
	}
	im := images{n: int(dims[0]), rows: int(dims[1]), cols: int(dims[2])}
	if im.pixels, err = readExactly(path, r, im.n*im.rows*im.cols); err != nil {
		return images{}, err
	}
	return im, nil
}

func readLabels(path string) ([]byte, error) {
	r, closeFile, err := openIDX(path, 0x801)
	if err != nil {
		return nil, err
	}
	defer closeFile()
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if n < 1 || n > maxImages {
		return nil, fmt.Errorf("%s: header says %d labels; want 1 to %d", path, n, maxImages)
	}
	return readExactly(path, r, int(n))
}

func normalise(im images, labels []byte) ([]float32, []int32, error) {
	if im.n != len(labels) {
		return nil, nil, fmt.Errorf("%d images and %d labels", im.n, len(labels))
	}
	xs := make([]float32, len(im.pixels))
	for i, p := range im.pixels {
		xs[i] = (float32(p)/255 - Mean) / Std
	}
	ys := make([]int32, len(labels))
	for i, l := range labels {
		if l > 9 {
			return nil, nil, fmt.Errorf("label %d is %d", i, l)
		}
		ys[i] = int32(l)
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
