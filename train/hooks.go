package train

import "ferry"

// Hooks let a caller show a run. Each runs on the training goroutine, and
// none may keep the values it is given beyond the call.
type Hooks struct {
	// Start is called before the first step of this run.
	Start func(first, total int)
	// Step is called after every optimizer step.
	Step func(StepInfo)
	// Eval is called after each evaluation.
	Eval func(step int, metrics []Metric)
	// Message is called with lines for people (resumed from …).
	Message func(msg string)
	// Done is called when the loop ends, before the summary is made.
	Done func()

	// Inside a step, for measuring it (ferry demo does): StepStart before
	// its first micro-batch; ForwardStart and ForwardEnd around each
	// micro-batch's forward (ForwardEnd before the loss); GradsReady with
	// every gradient complete, before clipping and the optimizer, or, for
	// an optimizer inside backward, GradReady with each parameter before
	// its update; StepEnd after the optimizer.
	StepStart    func(step int)
	ForwardStart func(step, micro int)
	ForwardEnd   func(step, micro int)
	GradsReady   func(step int, params []*ferry.Tensor)
	GradReady    func(step int, p *ferry.Tensor)
	StepEnd      func(step int)
}

// StepInfo describes one finished step.
type StepInfo struct {
	Step, Total    int
	Loss           float64 // this step's mean loss over its micro-batches
	Smoothed       float64 // exponential moving average (0.9) of Loss
	LR             float64
	ItemsPerSecond float64 // since this run started
	Elapsed        float64 // seconds since this run started
	DeviceBytes    int64   // allocated on the device after the step
	Log            bool    // a logging interval ends here
}
