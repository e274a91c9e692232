package plan

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/offload"
)

// A recording is one training step of a model on the meta device, as the
// planner needs it: every save (for validating policies), every distinct
// saved storage with its size, where it was first saved and when backward
// first used it, and the step cut into units — each checkpointable segment
// (ferry.Tape.Segment) and each stretch of forward between segments — with
// the peak memory and the compute time of each unit's forward and
// backward.
type recording struct {
	saves    []offload.SavedTensor
	storages []*storage
	units    []*unit
	peak     int64   // whole step
	seconds  float64 // whole step, predicted
}

// storage is one distinct saved storage.
type storage struct {
	first     saveKey   // its first save
	also      []saveKey // later saves of the same storage (in later modules)
	bytes     int64
	unit      int  // the unit of its first save
	candidate bool // may leave the device (not a parameter, not held outside the tape, at least MinBytes)
	// retained: kept (and placed) even when its unit is recomputed — an
	// input of the segment, or a storage a later unit saves too.
	retained bool
	unpackAt float64 // compute clock at backward's first use
	unpacked bool
	order    int // position among candidates, in save order
}

type saveKey struct {
	Module string
	Slot   int
	Op     string
	Shape  []int
}

// unit is one segment or stretch of forward, and the part of backward
// that first uses what it saved.
type unit struct {
	name    string // the segment's module path; "" for a stretch between segments
	segment bool
	// inputs are the segment's inputs' storages (nil: an input not saved
	// anywhere else), in the order Checkpoint saves them.
	inputs   []*storage
	fwdPeak  int64   // most allocated during the unit's forward
	bwdPeak  int64   // most allocated during the unit's backward
	hasBwd   bool    // backward used something the unit saved
	fwdSec   float64 // compute time of the unit's forward
	bwdSec   float64
	storages []*storage
}

// recorder is the saved-tensor and segment hooks that make a recording.
type recorder struct {
	dev       *meta.Device
	alloc     *device.Allocator
	minBytes  int64
	rec       *recording
	byStorage map[any]*storage
	pending   map[any]*unit // segment inputs not saved yet
	cur       int           // forward: the current unit
	bwd       int           // backward: the current unit; -1 in forward
	start     float64       // compute clock at the current phase's start
}

type recPacked struct {
	t *ferry.Tensor
}

func (p *recPacked) Release() { p.t.Release() }

func newRecorder(dev *meta.Device, minBytes int64) *recorder {
	r := &recorder{dev: dev, alloc: dev.Allocator(), minBytes: minBytes, rec: &recording{},
		byStorage: map[any]*storage{}, pending: map[any]*unit{}, bwd: -1}
	r.rec.units = []*unit{{}}
	r.alloc.ResetPeak()
	r.start = dev.Now()
	return r
}

// closePhase charges the memory peak and the time since the last boundary
// to the phase under way, and starts the next.
func (r *recorder) closePhase() {
	peak, now := r.alloc.Stats().AllocatedBytes.Peak, r.dev.Now()
	if r.bwd < 0 {
		u := r.rec.units[r.cur]
		u.fwdPeak, u.fwdSec = max(u.fwdPeak, peak), u.fwdSec+now-r.start
	} else {
		u := r.rec.units[r.bwd]
		u.bwdPeak, u.bwdSec = max(u.bwdPeak, peak), u.bwdSec+now-r.start
		u.hasBwd = true
	}
	r.alloc.ResetPeak()
	r.start = now
}

func (r *recorder) segmentHooks(recompute bool) *ferry.SegmentHooks {
	return &ferry.SegmentHooks{
		Recompute: func(string) bool { return recompute },
		Enter: func(module string, inputs []*ferry.Tensor) {
			r.closePhase()
			u := &unit{name: module, segment: true}
			r.rec.units = append(r.rec.units, u)
			r.cur = len(r.rec.units) - 1
			for _, x := range inputs {
				s := r.byStorage[x.Storage()]
				if s != nil {
					s.retained = true
				} else {
					r.pending[x.Storage()] = u
				}
				u.inputs = append(u.inputs, s)
			}
		},
		Exit: func(string) {
			r.closePhase()
			r.rec.units = append(r.rec.units, &unit{})
			r.cur = len(r.rec.units) - 1
		},
	}
}

func (r *recorder) hooks() *ferry.SavedTensorHooks {
	return &ferry.SavedTensorHooks{
		Pack: func(t *ferry.Tensor, info ferry.SaveInfo) any {
			key := saveKey{Module: info.Module, Slot: info.Index, Op: info.Op, Shape: t.Shape()}
			r.rec.saves = append(r.rec.saves, offload.SavedTensor{Module: info.Module, Slot: info.Index, Op: info.Op, Shape: key.Shape, Bytes: t.StorageBytes()})
			if info.Parameter || t.StorageBytes() == 0 {
				return &recPacked{t: t}
			}
			st := t.Storage()
			if s := r.byStorage[st]; s != nil {
				s.also = append(s.also, key)
				if s.unit != r.cur {
					s.retained = true
				}
				return &recPacked{t: t}
			}
			s := &storage{first: key, bytes: t.StorageBytes(), unit: r.cur,
				candidate: t.StorageBytes() >= r.minBytes && t.OutsideHandles() == 0}
			if u, ok := r.pending[st]; ok {
				s.retained = true
				delete(r.pending, st)
				for i, in := range u.inputs {
					if in == nil {
						u.inputs[i] = s
						break
					}
				}
			}
			r.byStorage[st] = s
			r.rec.storages = append(r.rec.storages, s)
			r.rec.units[r.cur].storages = append(r.rec.units[r.cur].storages, s)
			return &recPacked{t: t}
		},
		Unpack: func(p any) (*ferry.Tensor, error) {
			rp := p.(*recPacked)
			if s := r.byStorage[rp.t.Storage()]; s != nil && !s.unpacked {
				s.unpacked, s.unpackAt = true, r.dev.Now()
				switch {
				case r.bwd < 0:
					r.closePhase()
					r.bwd = s.unit
				case s.unit < r.bwd:
					r.closePhase()
					r.bwd = s.unit
				}
			}
			return rp.t, nil
		},
	}
}

// record runs model's step twice on a fresh meta device (the first step
// allocates the optimizer's state) and records the second; with recompute
// every segment runs as a checkpoint.
func record(m Model, profile *meta.Profile, inBackward, recompute bool, minBytes int64) (*recording, error) {
	dev := meta.New(device.Options{}, profile)
	defer dev.Close()
	step, err := m.Build(dev, inBackward)
	if err != nil {
		return nil, err
	}
	defer step.Release()
	var r *recorder
	for i := 0; i < 2; i++ {
		r = newRecorder(dev, minBytes)
		t0 := dev.Now()
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.SetSegmentHooks(r.segmentHooks(recompute))
			tape.PushHooks(r.hooks())
			return step.Run(tape)
		})
		if err != nil {
			return nil, fmt.Errorf("plan: recording a step on the meta device: %w", err)
		}
		r.closePhase()
		r.rec.seconds = dev.Now() - t0
	}
	rec := r.rec
	for _, u := range rec.units {
		rec.peak = max(rec.peak, u.fwdPeak, u.bwdPeak)
	}
	n := 0
	for _, s := range rec.storages {
		if s.candidate {
			s.order = n
			n++
		}
	}
	return rec, nil
}

// modelInfo is what a policy is validated against.
func (rec *recording) modelInfo() offload.ModelInfo {
	info := offload.ModelInfo{Saved: rec.saves}
	for _, u := range rec.units {
		if u.segment {
			info.Segments = append(info.Segments, u.name)
		}
	}
	return info
}
