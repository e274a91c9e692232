package nn

import "ferry"

// Tanh is tanh as a module.
type Tanh struct{}

func (Tanh) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Tanh(x) }
func (Tanh) Parameters() []*ferry.Tensor           { return nil }

// Sigmoid is the logistic function as a module.
type Sigmoid struct{}

func (Sigmoid) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Sigmoid(x) }
func (Sigmoid) Parameters() []*ferry.Tensor           { return nil }
