// Package ferry is a deep-learning training runtime: tensors on a device,
// ops whose forward and backward sit side by side, and a Tape that records
// one training step so that Backward can walk it in reverse.
//
// A step runs inside Step, which gives it a fresh tape and frees everything
// the step allocated when it returns; device memory is never left to Go's
// garbage collector. Parameters live outside steps, require grad, and
// collect their gradients in Grad:
//
//	err := ferry.Step(func(tape *ferry.Tape) error {
//		y := model.Forward(tape.Input(x))
//		return ferry.MSELoss(y, tape.Input(target)).Backward()
//	})
//
// SavedTensorHooks decide what autograd keeps of each tensor an op saves
// for backward (package offload moves them off the device), and
// Tape.Checkpoint keeps only a segment's inputs and runs it again in
// backward. Layers are in package nn, optimizers in optim, devices in
// device and its subpackages.
package ferry
