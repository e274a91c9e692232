// Package ferry is a stub of ferry's tensor API: just the signatures the
// ferrydiscard check looks at.
package ferry

type Device interface{ Name() string }

type Tensor struct{ name string }

type Tape struct{}

func (t *Tensor) To(dev Device) *Tensor         { return &Tensor{} }
func (t *Tensor) Contiguous() *Tensor           { return &Tensor{} }
func (t *Tensor) Clone() *Tensor                { return &Tensor{} }
func (t *Tensor) Detach() *Tensor               { return &Tensor{} }
func (t *Tensor) Reshape(shape ...int) *Tensor  { return &Tensor{} }
func (t *Tensor) Split(size, dim int) []*Tensor { return nil }
func (t *Tensor) SetName(n string) *Tensor      { t.name = n; return t }
func (t *Tensor) SetCategory(c int) *Tensor     { return t }
func (t *Tensor) RequireGrad() *Tensor          { return t }
func (t *Tensor) Grad() *Tensor                 { return nil }
func (t *Tensor) Release()                      {}
func (t *Tensor) Backward() error               { return nil }
func (t *Tensor) Numel() int                    { return 0 }
func (tp *Tape) Input(t *Tensor) *Tensor        { return &Tensor{} }
func (tp *Tape) Adopt(t *Tensor) *Tensor        { return t }
func (tp *Tape) WithHooks(h any, f func())      { f() }
func ReLU(x *Tensor) *Tensor                    { return &Tensor{} }
func Add(a, b *Tensor) *Tensor                  { return &Tensor{} }
func Zeros(dev Device, shape ...int) *Tensor    { return &Tensor{} }
func Load(path string) (*Tensor, error)         { return &Tensor{}, nil }
func Step(f func(tape *Tape) error) error       { return f(&Tape{}) }
