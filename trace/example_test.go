package trace_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu" // registers "cpu" with device.Open
	"ferry/nn"
	"ferry/trace"
)

// Record one training step's memory by category and its phases, then
// write a Chrome trace (open it in Perfetto or chrome://tracing). The
// recorder here counts events instead of reading a clock, so that the
// output is the same on every run; trace.New(nil) records wall time.
func ExampleRecorder_WriteChrome() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	l1, _ := nn.NewLinear(dev, 128, 128, true, rng)
	l2, _ := nn.NewLinear(dev, 128, 128, true, rng)
	model := nn.NewSequential(l1, nn.ReLU{}, l2)
	defer nn.Release(model)
	x := ferry.Randn(dev, rng, 64, 128)
	defer x.Release()

	rec := trace.NewCounting()
	stop := rec.Allocator("cpu", dev.Allocator()) // every alloc, free and re-tag from now on
	err = ferry.Step(func(tape *ferry.Tape) error {
		endForward := rec.Begin("step", "forward")
		loss := ferry.Mean(ferry.Square(model.Forward(tape.Input(x))))
		endForward()
		defer rec.Begin("step", "backward")()
		return loss.Backward()
	})
	stop()
	if err != nil {
		log.Fatal(err)
	}

	var out bytes.Buffer // a file in real use
	if err := rec.WriteChrome(&out); err != nil {
		log.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string `json:"name"`
			Ph   string `json:"ph"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		log.Fatal(err)
	}
	counters := 0
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "C": // one memory sample: MiB per category
			counters++
		case "X": // a span
			fmt.Println("span:", e.Name)
		}
	}
	fmt.Println("memory samples:", counters)
	peak, _ := trace.Peak(rec.Samples("cpu"))
	fmt.Println("peak:", device.FormatBytes(peak))
	// Output:
	// span: forward
	// span: backward
	// memory samples: 28
	// peak: 386.50 KiB
}
