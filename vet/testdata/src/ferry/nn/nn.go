// Package nn is a stub of ferry/nn.
package nn

import "ferry"

func NewParameter(t *ferry.Tensor, name string) *ferry.Tensor { return t.RequireGrad().SetName(name) }

type Linear struct{ Weight, Bias *ferry.Tensor }

func (l *Linear) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.ReLU(x) }
func (l *Linear) Parameters() []*ferry.Tensor           { return []*ferry.Tensor{l.Weight, l.Bias} }
