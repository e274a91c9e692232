package plan

import (
	"ferry"
	"ferry/device"
)

// A Model is what the planner plans for: anything that can build one
// training step on a device. The planner records that step on the meta
// device (exact memory, time from a profile) and replays it under
// candidate placements; it knows nothing else about the model.
type Model interface {
	// String describes the model and its batch for people.
	String() string
	// Build makes the model, its data and its optimizer on dev and returns
	// its training step. With inBackward the step updates each parameter
	// inside backward (optim.InBackward) instead of after it.
	Build(dev device.Device, inBackward bool) (*Step, error)
}

// Step is one built training step.
type Step struct {
	// Run runs forward, loss, backward and the optimizer on tape. The
	// planner pushes its saved-tensor hooks and sets its SegmentHooks on
	// tape before calling it; the model marks the blocks that may be
	// recomputed with ferry.Tape.Segment. Every Run must do the same ops.
	Run func(tape *ferry.Tape) error
	// Release frees what Build made.
	Release func()
	// HostStateBytes, if set, is the host memory the step keeps outside
	// the host allocator (an optimizer's state on the host, in Go
	// memory), added to the host peak.
	HostStateBytes func() int64
}

// PrefetchModel is a Model whose step streams parameters to the device
// (offload.Streamer): Replay builds it with the policy's lookahead as the
// streamer's prefetch (offload.StreamConfig.Prefetch), as a run of the
// policy sets it from its offloader's (offload.Memory). A Model that is
// not one streams with the default.
type PrefetchModel interface {
	Model
	// WithPrefetch is the model whose streamer starts each upload n
	// parameter uses ahead.
	WithPrefetch(n int) Model
}

// StreamsModel is a Model whose streamer can run its copies on given side
// streams, as offload.Memory's shares its offloader's (Offloader.Streams):
// Replay passes its offloader's, so that each copy's event, and with it
// when a block freed after the copy is reused, is the run's.
type StreamsModel interface {
	Model
	WithStreams(d2h, h2d device.Stream) Model
}

// RankModel is a Model that can also be one rank of data-parallel
// training (Options.Ranks).
type RankModel interface {
	Model
	// ForRanks is the step of the rank of ranks that holds the most
	// sharded state at ZeRO stage shard (0, 1, 2), built with the
	// trainer's sharding code over a communicator that moves nothing
	// (dist.Pretend); its Build is never asked for inBackward.
	ForRanks(ranks, shard int) (Model, error)
}

// Shrinker is a Model that can say which smaller versions of itself to
// suggest when nothing fits (a smaller batch, a shorter sequence), most
// preferable first.
type Shrinker interface {
	Smaller() []Variant
}

// Variant is a smaller version of a model and what was changed.
type Variant struct {
	Change string // "batch 4"
	Model  Model
}

// MaxLayers bounds the depth the CLI plans for: a deeper model is refused
// up front rather than recorded for minutes.
const MaxLayers = 400
