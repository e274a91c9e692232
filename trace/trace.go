// Package trace records where memory and time go during training, and
// writes them as pictures: a Chrome trace (open it in Perfetto or
// chrome://tracing) with one memory counter per category and spans for the
// phases of a step, and an SVG chart of allocated memory over time, stacked
// by category.
//
//	rec := trace.New(nil)             // wall-clock time
//	stop := rec.Allocator("cpu", dev.Allocator())
//	defer stop()
//	end := rec.Begin("step", "forward")
//	... forward ...
//	end()
//	rec.WriteChrome(f)
package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"ferry/device"
)

// Recorder collects memory samples and spans. It is safe for concurrent
// use.
type Recorder struct {
	clock func() float64
	unit  string // of the clock: "s", or "events" for NewCounting

	mu      sync.Mutex
	samples map[string][]Sample // by allocator name
	spans   []Span
}

// Sample is an allocator's bytes by category just after one change.
type Sample struct {
	Seconds float64                     `json:"t"`
	Bytes   [device.NumCategories]int64 `json:"bytes"`
}

// Span is a named interval on a track ("step", "offload").
type Span struct {
	Track string  `json:"track"`
	Name  string  `json:"name"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// New makes a recorder. clock returns the time in seconds; nil uses wall
// time since New (the meta device passes its simulated clock).
func New(clock func() float64) *Recorder {
	if clock == nil {
		start := time.Now()
		clock = func() float64 { return time.Since(start).Seconds() }
	}
	return &Recorder{clock: clock, unit: "s", samples: map[string][]Sample{}}
}

// NewCounting makes a recorder whose clock counts samples and span ends:
// for a device whose time does not move (the meta device without a
// profile), the order of events is the time axis.
func NewCounting() *Recorder {
	r := &Recorder{unit: "events", samples: map[string][]Sample{}}
	n := 0.0
	r.clock = func() float64 { n++; return n }
	return r
}

// Allocator records every allocation, free and re-tag of a as a sample
// under name, starting from what a holds now. It takes a's observer (an
// allocator has one); stop gives it back.
func (r *Recorder) Allocator(name string, a *device.Allocator) (stop func()) {
	st := a.Stats()
	var cur [device.NumCategories]int64
	for c := range cur {
		cur[c] = st.ByCategory[c].Current
	}
	r.add(name, cur)
	a.Observe(func(e device.AllocEvent) {
		switch {
		case e.Retag:
			cur[e.From] -= e.Bytes
			cur[e.Category] += e.Bytes
		case e.Alloc:
			cur[e.Category] += e.Bytes
		default:
			cur[e.Category] -= e.Bytes
		}
		r.add(name, cur)
	})
	return func() { a.Observe(nil) }
}

func (r *Recorder) add(name string, cur [device.NumCategories]int64) {
	t := r.clock()
	r.mu.Lock()
	r.samples[name] = append(r.samples[name], Sample{Seconds: t, Bytes: cur})
	r.mu.Unlock()
}

// Begin starts a span on track; calling the returned function ends it.
func (r *Recorder) Begin(track, name string) (end func()) {
	start := r.clock()
	return func() { r.Span(track, name, start, r.clock()) }
}

// Span records a finished span.
func (r *Recorder) Span(track, name string, start, end float64) {
	r.mu.Lock()
	r.spans = append(r.spans, Span{Track: track, Name: name, Start: start, End: end})
	r.mu.Unlock()
}

// Unit is the unit of the recorder's clock: "s", or "events" for a
// NewCounting recorder, whose samples' Seconds count events.
func (r *Recorder) Unit() string { return r.unit }

// Samples returns the samples recorded for an allocator.
func (r *Recorder) Samples(name string) []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sample(nil), r.samples[name]...)
}

// Spans returns the spans recorded.
func (r *Recorder) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// chromeEvent is one entry of the Chrome trace event format.
type chromeEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"` // microseconds
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteChrome writes the recording in the Chrome trace event format: a
// counter per allocator with one series per category (MiB), and each
// track's spans on a thread of its own.
func (r *Recorder) WriteChrome(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var evs []chromeEvent
	names := make([]string, 0, len(r.samples))
	for n := range r.samples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, s := range r.samples[n] {
			args := map[string]any{}
			for c := device.Category(0); c < device.NumCategories; c++ {
				args[c.String()] = float64(s.Bytes[c]) / (1 << 20)
			}
			evs = append(evs, chromeEvent{Name: n + " allocated (MiB)", Ph: "C", Ts: s.Seconds * 1e6, Pid: 1, Args: args})
		}
	}
	tids := map[string]int{}
	for _, s := range r.spans {
		tid, ok := tids[s.Track]
		if !ok {
			tid = len(tids) + 1
			tids[s.Track] = tid
			evs = append(evs, chromeEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]any{"name": s.Track}})
		}
		evs = append(evs, chromeEvent{Name: s.Name, Ph: "X", Ts: s.Start * 1e6, Dur: (s.End - s.Start) * 1e6, Pid: 1, Tid: tid})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms"})
}

// Peak returns the largest total of an allocator's samples and when it
// happened.
func Peak(samples []Sample) (bytes int64, at float64) {
	for _, s := range samples {
		var t int64
		for _, b := range s.Bytes {
			t += b
		}
		if t > bytes {
			bytes, at = t, s.Seconds
		}
	}
	return bytes, at
}

func formatMiB(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
