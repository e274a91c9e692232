package nn

import "ferry"

// ReLU is max(x, 0) as a module.
type ReLU struct{}

func (ReLU) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.ReLU(x) }
func (ReLU) Parameters() []*ferry.Tensor           { return nil }

// Epilogue: a Linear before a ReLU runs as ferry.LinearReLU.
func (ReLU) Epilogue() ferry.Epilogue { return ferry.EpilogueReLU }

// GELU is the Gaussian error linear unit as a module; Tanh selects the tanh
// approximation (PyTorch: approximate="tanh").
type GELU struct{ Tanh bool }

func (g GELU) Forward(x *ferry.Tensor) *ferry.Tensor {
	if g.Tanh {
		return ferry.GELUTanh(x)
	}
	return ferry.GELU(x)
}
func (GELU) Parameters() []*ferry.Tensor { return nil }

// Epilogue: a Linear before a tanh GELU runs as ferry.LinearGELUTanh (the
// exact GELU has no fused form).
func (g GELU) Epilogue() ferry.Epilogue {
	if g.Tanh {
		return ferry.EpilogueGELUTanh
	}
	return ferry.EpilogueNone
}

// Tanh is tanh as a module.
type Tanh struct{}

func (Tanh) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Tanh(x) }
func (Tanh) Parameters() []*ferry.Tensor           { return nil }

// Sigmoid is the logistic function as a module.
type Sigmoid struct{}

func (Sigmoid) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Sigmoid(x) }
func (Sigmoid) Parameters() []*ferry.Tensor           { return nil }
