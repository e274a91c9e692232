package models_test

import (
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	_ "ferry/models/all"
)

// Every registered family builds at its defaults for each kind of device
// and runs a training step on the meta device; its smaller variants are
// valid sizes of it.
func TestEveryFamilyRunsAStepOnMeta(t *testing.T) {
	names := models.Names(nil)
	if len(names) < 3 {
		t.Fatalf("families: %v", names)
	}
	for _, name := range names {
		f, err := models.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"cpu", "meta"} {
			s := models.Defaults(f, kind)
			if err := models.Validate(f, s); err != nil {
				t.Errorf("%s on %s: defaults %v: %v", name, kind, s, err)
				continue
			}
			dev := meta.New(device.Options{}, nil)
			w, err := f.Workload(dev, s, 1)
			if err != nil {
				t.Errorf("%s on %s: %v", name, kind, err)
				continue
			}
			opt, err := models.NewOptimizer(w, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			err = ferry.Step(func(tape *ferry.Tape) error {
				x, y := w.Data(dev, 1)
				defer x.Release()
				defer y.Release()
				out := w.Forward(tape, tape.Input(x), kind == "meta")
				l := w.Loss(out, tape.Adopt(y.To(dev)))
				if err := l.Backward(); err != nil {
					return err
				}
				return opt.Step()
			})
			if err != nil {
				t.Errorf("%s on %s: a step: %v", name, kind, err)
			}
			if w.ParameterCount() <= 0 || w.ActivationBytes() <= 0 || !strings.Contains(w.Describe(), "batch") {
				t.Errorf("%s: figures %d, %d, %q", name, w.ParameterCount(), w.ActivationBytes(), w.Describe())
			}
			for _, v := range w.Smaller() {
				if err := models.Validate(f, v.Sizes); err != nil {
					t.Errorf("%s: smaller %q: %v", name, v.Change, err)
				}
			}
			opt.Release()
			w.Release()
			if got := dev.Allocator().Allocated(); got != 0 {
				t.Errorf("%s: %d bytes left on the device", name, got)
			}
			if lf, ok := f.(models.LanguageFamily); ok && kind == "cpu" {
				lm, err := lf.LanguageModel(dev, s, 1)
				if err != nil || lm.Context() != s.Int("seq") || lm.Vocab() != s.Int("vocab") {
					t.Errorf("%s: language model %v", name, err)
				} else {
					for _, p := range lm.Parameters() {
						p.Release()
					}
				}
			}
		}
	}
}

func TestValidateNamesWhatIsWrong(t *testing.T) {
	gpt, _ := models.Lookup("gpt")
	s := models.Defaults(gpt, "cpu")
	for k, v := range map[string]float64{"layers": 0, "heads": 2.5, "dropout": 1, "width": 3} {
		bad := models.Sizes{}
		for a, b := range s {
			bad[a] = b
		}
		bad[k] = v
		if err := models.Validate(gpt, bad); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s %v: %v", k, v, err)
		}
	}
	if _, err := models.Lookup("bert"); err == nil || !strings.Contains(err.Error(), "gpt") {
		t.Errorf("unknown family: %v", err)
	}
}
