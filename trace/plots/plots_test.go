package plots_test

import (
	"encoding/xml"
	"errors"
	"image"
	_ "image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
	"ferry/trace"
	"ferry/trace/plots"
)

// out is where the pictures go: a fresh temporary directory, or
// $FERRY_PLOTS_DIR to keep them for looking at.
func out(t *testing.T) string {
	if d := os.Getenv("FERRY_PLOTS_DIR"); d != "" {
		return filepath.Join(d, t.Name())
	}
	return t.TempDir()
}

// checkFiles checks that DIR/NAME.png decodes as a PNG of the expected
// size and DIR/NAME.svg parses as XML with an <svg> root, and that no
// temporary file is left beside them.
func checkFiles(t *testing.T, dir, name string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, format, err := image.Decode(f)
	if err != nil {
		t.Fatalf("%s.png: %v", name, err)
	}
	if format != "png" || img.Bounds().Dx() != 1200 || img.Bounds().Dy() != 675 {
		t.Fatalf("%s.png: %s of %v, want png of 1200×675", name, format, img.Bounds())
	}
	if st, err := f.Stat(); err != nil || st.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("%s.png: mode %v, want readable by all", name, st.Mode())
	}
	s, err := os.Open(filepath.Join(dir, name+".svg"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dec := xml.NewDecoder(s)
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s.svg: %v", name, err)
		}
		if e, ok := tok.(xml.StartElement); ok && root == "" {
			root = e.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s.svg: root element %q, want svg", name, root)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func lossPoints(n, every int, start, floor, noise float64, rng *rand.Rand) []plots.Point {
	var pts []plots.Point
	for s := 0; s <= n; s += every {
		v := floor + (start-floor)*math.Exp(-float64(s)/float64(n)*4) + noise*rng.NormFloat64()
		pts = append(pts, plots.Point{Step: s, Value: v})
	}
	return pts
}

func TestLossCurves(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	train := lossPoints(5000, 10, 4.17, 1.1, 0.05, rng)
	val := lossPoints(5000, 250, 4.2, 1.3, 0.01, rng)
	dir := filepath.Join(out(t), "new", "dir") // created
	if err := plots.LossCurves(dir, "first", "MSE", train[:3], nil); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "loss")
	// Again over the same files: replaced whole.
	if err := plots.LossCurves(dir, "baby GPT on Go sources", "", train, val); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "loss")
	b, _ := os.ReadFile(filepath.Join(dir, "loss.svg"))
	for _, want := range []string{"loss (nats per token)", "step", "train", "validation", "baby GPT on Go sources"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("loss.svg does not say %q", want)
		}
	}
	if strings.Contains(string(b), "first") {
		t.Error("loss.svg still holds the first picture")
	}
}

func TestLossCurvesOddInput(t *testing.T) {
	dir := out(t)
	// One point, unsorted steps, a NaN (a diverged step) and an infinity.
	for name, train := range map[string][]plots.Point{
		"one":      {{Step: 7, Value: 2.5}},
		"flat":     {{Step: 0, Value: 1}, {Step: 1, Value: 1}},
		"unsorted": {{Step: 3, Value: 1}, {Step: 1, Value: 3}, {Step: 2, Value: 2}},
		"diverged": {{Step: 0, Value: 2}, {Step: 1, Value: 1.5}, {Step: 2, Value: math.NaN()}, {Step: 3, Value: math.Inf(1)}},
		"big":      {{Step: 0, Value: 1e6}, {Step: 100000, Value: 3e5}},
	} {
		d := filepath.Join(dir, name)
		if err := plots.LossCurves(d, name, "", train, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkFiles(t, d, "loss")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "diverged", "loss.svg"))
	if !strings.Contains(string(b), "2 not finite") {
		t.Error("the legend does not say that two values were left out")
	}
}

func TestEmptyInputIsErrNoData(t *testing.T) {
	dir := t.TempDir()
	for name, err := range map[string]error{
		"loss":          plots.LossCurves(dir, "x", "", nil, []plots.Point{{1, 1}}),
		"loss all NaN":  plots.LossCurves(dir, "x", "", []plots.Point{{1, math.NaN()}}, nil),
		"memory":        plots.Memory(dir, "memory", "x", nil),
		"accuracy":      plots.Accuracy(dir, "x", nil),
		"accuracy +Inf": plots.Accuracy(dir, "x", []plots.Point{{1, math.Inf(1)}}),
	} {
		if !errors.Is(err, plots.ErrNoData) {
			t.Errorf("%s: %v, want ErrNoData", name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written for empty input: %v", entries)
	}
}

func TestUnwritableDirectory(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pts := []plots.Point{{0, 2}, {1, 1}}
	// A directory under a regular file cannot be made, root or not.
	err := plots.LossCurves(filepath.Join(file, "plots"), "x", "", pts, nil)
	if err == nil || !strings.Contains(err.Error(), "output directory") {
		t.Fatalf("got %v, want an error about the output directory", err)
	}

	if os.Geteuid() == 0 {
		t.Log("running as root: permissions do not stop writes; skipping the read-only directory")
		return
	}
	ro := filepath.Join(base, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(ro, 0o755)
	err = plots.LossCurves(ro, "x", "", pts, nil)
	if err == nil || !strings.Contains(err.Error(), "loss.png") {
		t.Fatalf("got %v, want an error naming loss.png", err)
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 0 {
		t.Errorf("left in a read-only directory: %v", entries)
	}
}

func TestAccuracy(t *testing.T) {
	dir := out(t)
	acc := []plots.Point{{1, 0.912}, {2, 0.951}, {3, 0.968}, {4, 0.974}, {5, 0.979}, {6, 0.978}, {7, 0.981}, {8, 0.9803}}
	if err := plots.Accuracy(dir, "MLP on MNIST", acc); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "accuracy")
	b, _ := os.ReadFile(filepath.Join(dir, "accuracy.svg"))
	if !strings.Contains(string(b), "best 98.10% (step 7)") {
		t.Error("accuracy.svg does not name the best step")
	}
	if err := plots.Accuracy(filepath.Join(dir, "one"), "one epoch", acc[:1]); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, filepath.Join(dir, "one"), "accuracy")
}

// syntheticStep is one training step of a model with 1 GiB of parameters
// and AdamW: activations build up over forward (0.1 s) and go during
// backward (0.2 s) as gradients come, then the optimizer step; temporaries
// flicker throughout.
func syntheticStep() []trace.Sample {
	const gib = 1 << 30
	var out []trace.Sample
	var b [device.NumCategories]int64
	b[device.Parameter] = gib
	b[device.OptimizerState] = 2 * gib
	b[device.Workspace] = 8 << 20
	t := 0.0
	add := func(dt float64) {
		t += dt
		out = append(out, trace.Sample{Seconds: t, Bytes: b})
	}
	add(0)
	for i := 0; i < 24; i++ { // forward
		b[device.Temporary] = 64 << 20
		add(0.002)
		b[device.Temporary] = 0
		b[device.Activation] += 96 << 20
		add(0.002)
	}
	for i := 0; i < 24; i++ { // backward
		b[device.Temporary] = 64 << 20
		add(0.004)
		b[device.Temporary] = 0
		b[device.Activation] -= 96 << 20
		b[device.Gradient] += gib / 24
		add(0.004)
	}
	add(0.03) // optimizer
	b[device.Gradient] = 0
	add(0.001)
	return out
}

func TestMemoryOverStep(t *testing.T) {
	dir := out(t)
	samples := syntheticStep()
	if err := plots.Memory(dir, "memory", "one step, AdamW", samples); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "memory")
	b, _ := os.ReadFile(filepath.Join(dir, "memory.svg"))
	for _, want := range []string{"parameters", "optimizer state", "gradients", "activations", "temporaries", "workspace", "(GiB)", "(ms)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("memory.svg does not say %q", want)
		}
	}
}

func TestMemoryOverStepSmallAndDegenerate(t *testing.T) {
	dir := out(t)
	var one [device.NumCategories]int64
	one[device.Activation] = 3 << 10
	for name, samples := range map[string][]trace.Sample{
		"one sample":    {{Seconds: 5, Bytes: one}},
		"all zero":      {{Seconds: 0}, {Seconds: 1e-5}},
		"kib, seconds":  {{Seconds: 0, Bytes: one}, {Seconds: 2.5}},
		"same instant":  {{Seconds: 1, Bytes: one}, {Seconds: 1}},
		"microseconds ": {{Seconds: 0}, {Seconds: 3e-6, Bytes: one}, {Seconds: 7e-6}},
	} {
		d := filepath.Join(dir, name)
		if err := plots.Memory(d, "memory", name, samples); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkFiles(t, d, "memory")
	}
}

// A real recording: the meta device's allocator through a trace.Recorder.
func TestMemoryOverStepFromRecorder(t *testing.T) {
	dev, err := device.Open("meta", device.Options{})
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	a := dev.Allocator()
	rec := trace.New(nil)
	stop := rec.Allocator("meta", a)
	w, _ := a.Alloc(64<<20, device.Parameter)
	x, _ := a.Alloc(16<<20, device.Activation)
	g, _ := a.Alloc(64<<20, device.Gradient)
	a.Free(x)
	a.Free(g)
	a.Free(w)
	stop()
	dir := out(t)
	if err := plots.Memory(dir, "memory", "meta", rec.Samples("meta")); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "memory")
}

// TestCountingClockIsNotSeconds draws a NewCounting recorder's samples: the
// x axis must count events, not claim seconds the device never measured.
func TestCountingClockIsNotSeconds(t *testing.T) {
	dev, err := device.Open("meta", device.Options{})
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	a := dev.Allocator()
	rec := trace.NewCounting()
	stop := rec.Allocator("meta", a)
	w, _ := a.Alloc(64<<20, device.Parameter)
	x, _ := a.Alloc(16<<20, device.Activation)
	a.Free(x)
	a.Free(w)
	stop()
	dir := out(t)
	if err := plots.MemoryOf(dir, "memory", "meta", rec, "meta"); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, "memory")
	b, _ := os.ReadFile(filepath.Join(dir, "memory.svg"))
	if strings.Contains(string(b), "time in the step") || !strings.Contains(string(b), "in order") {
		t.Error("a counting recorder's picture labels its x axis as time")
	}
	if !strings.Contains(string(b), "at event 2") {
		t.Error("the peak is not placed by event")
	}
}

// TestLongTitleIsWrapped checks that a title wider than the plot is broken
// into lines rather than cut off at both ends.
func TestLongTitleIsWrapped(t *testing.T) {
	long := strings.Repeat("a long title word ", 12) + "END"
	dir := out(t)
	pts := []plots.Point{{Step: 0, Value: 2}, {Step: 1, Value: 1}}
	if err := plots.LossCurves(dir, long, "loss", pts, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "loss.svg"))
	svg := string(b)
	if !strings.Contains(svg, "END") || strings.Contains(svg, long) {
		t.Error("the long title is not in the picture in more than one line")
	}
}
