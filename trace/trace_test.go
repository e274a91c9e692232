package trace_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"ferry/device"
	"ferry/device/meta"
	"ferry/trace"
)

func TestRecordsCategoriesAndSpans(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	a := dev.Allocator()
	p, _ := a.Alloc(4096, device.Activation)
	rec := trace.NewCounting()
	stop := rec.Allocator("meta", a)
	end := rec.Begin("step", "forward")
	x, _ := a.Alloc(1024, device.Activation)
	a.SetCategory(p, device.Parameter)
	a.Free(x)
	end()
	stop()
	y, _ := a.Alloc(512, device.Temporary) // after stop: not recorded
	a.Free(y)

	s := rec.Samples("meta")
	if len(s) != 4 {
		t.Fatalf("%d samples, want 4 (start, alloc, retag, free)", len(s))
	}
	last := s[len(s)-1].Bytes
	if last[device.Parameter] != 4096 || last[device.Activation] != 0 {
		t.Fatalf("last sample %v", last)
	}
	if peak, _ := trace.Peak(s); peak != 5120 {
		t.Fatalf("peak %d, want 5120", peak)
	}
	var chrome bytes.Buffer
	if err := rec.WriteChrome(&chrome); err != nil {
		t.Fatal(err)
	}
	var doc struct{ TraceEvents []map[string]any }
	if err := json.Unmarshal(chrome.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var counters, spans int
	for _, e := range doc.TraceEvents {
		switch e["ph"] {
		case "C":
			counters++
		case "X":
			spans++
		}
	}
	if counters != 4 || spans != 1 {
		t.Fatalf("%d counters and %d spans", counters, spans)
	}
}
