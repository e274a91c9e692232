package plot_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/device"
	"ferry/trace"
	"ferry/train"
	"ferry/train/plot"
)

// Plot writes the loss curve, the first higher-is-better metric and the
// memory of a step, each as PNG and SVG, and lists exactly the files it
// wrote; what has no data is skipped.
func TestWriterPlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plots")
	w := plot.Writer{Dir: dir}
	if err := w.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Check left the directory it made: %v", err)
	}
	h := &train.History{
		Train:  []train.Point{{Step: 1, Value: 2}, {Step: 2, Value: 1.5}, {Step: 3, Value: 1}},
		Evals:  map[string][]train.Point{"val_loss": {{Step: 0, Value: 2.1}, {Step: 3, Value: 1.2}}, "accuracy": {{Step: 3, Value: 0.8}}},
		Better: map[string]train.Better{"val_loss": train.Lower, "accuracy": train.Higher},
	}
	var mem [device.NumCategories]int64
	mem[device.Parameter] = 1 << 20
	samples := []trace.Sample{{Seconds: 0, Bytes: mem}, {Seconds: 0.01, Bytes: mem}}
	files, err := w.Plot(train.PlotData{Title: "a run", History: h, Device: "cpu", Memory: samples})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range []string{"loss.png", "loss.svg", "accuracy.png", "accuracy.svg", "memory.png", "memory.svg"} {
		want = append(want, filepath.Join(dir, n))
	}
	if !slices.Equal(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(want) {
		t.Errorf("%d files in %s, want %d", len(ents), dir, len(want))
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	// An interrupted run's: no step, no metric, no memory: nothing.
	empty := plot.Writer{Dir: filepath.Join(t.TempDir(), "empty")}
	files, err = empty.Plot(train.PlotData{History: &train.History{}})
	if err != nil || len(files) != 0 {
		t.Errorf("an empty history: %v, %v", files, err)
	}
}

// Check refuses a directory that cannot be one.
func TestWriterCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		if err := (plot.Writer{Dir: dir}).Check(); err == nil {
			t.Errorf("%s: no error", dir)
		}
	}
}
