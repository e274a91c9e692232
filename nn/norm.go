package nn

import (
	"fmt"

	"ferry"
	"ferry/device"
)

// LayerNorm normalises over the last axis (PyTorch: nn.LayerNorm(C) with
// eps 1e-5), with Weight and Bias (either may be nil).
type LayerNorm struct {
	Weight, Bias *ferry.Tensor
	Eps          float32
}

// NewLayerNorm makes a LayerNorm of width c, weight ones and bias zeros
// (or no bias).
func NewLayerNorm(dev device.Device, c int, bias bool) (*LayerNorm, error) {
	if c < 1 {
		return nil, fmt.Errorf("nn.NewLayerNorm: width must be positive, got %d", c)
	}
	l := &LayerNorm{Eps: 1e-5}
	err := ferry.Catch(func() error {
		l.Weight = NewParameter(ferry.Ones(dev, c).SetCategory(device.Parameter), "weight")
		if bias {
			l.Bias = NewParameter(ferry.ZerosAs(dev, device.Parameter, c), "bias")
		}
		return nil
	})
	if err != nil {
		Release(l)
		return nil, err
	}
	return l, nil
}

func (l *LayerNorm) Forward(x *ferry.Tensor) *ferry.Tensor {
	return ferry.LayerNorm(x, l.Weight, l.Bias, l.Eps)
}

func (l *LayerNorm) Parameters() []*ferry.Tensor { return nonNil(l.Weight, l.Bias) }
func (l *LayerNorm) NamedParameters() []Named    { return weightBias(l.Weight, l.Bias) }

// RMSNorm normalises over the last axis by the root mean square, times
// Weight (PyTorch: Hugging Face's LlamaRMSNorm; ferry.RMSNorm).
type RMSNorm struct {
	Weight *ferry.Tensor // [C], or nil
	Eps    float32
}

func (n *RMSNorm) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x, n.Weight, n.Eps) }
func (n *RMSNorm) Parameters() []*ferry.Tensor           { return nonNil(n.Weight) }
func (n *RMSNorm) NamedParameters() []Named              { return weightBias(n.Weight, nil) }

var _ Module = (*RMSNorm)(nil)
