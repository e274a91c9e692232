package optim

import (
	"fmt"
	"math"
	"sync"

	"ferry"
	"ferry/device"
	"ferry/internal/optkernel"
)

// AdamW8bit is AdamW with both moments kept block-wise quantised to 8
// bits (Dettmers et al., "8-bit Optimizers via Block-wise Quantization";
// bitsandbytes' AdamW8bit, torchao's AdamW8bit): about 2 bytes of state a
// parameter instead of AdamW's 8, over float32 master weights, training
// like AdamW.
//
// Each moment of a parameter is 8-bit codes ("exp_avg_codes",
// "exp_avg_sq_codes", uint8, the parameter's shape) into a dynamic map
// (bitsandbytes' create_dynamic_map: signed for the first moment, unsigned
// for the second, qmap_table.go), each block of 256 elements scaled by its
// absolute maximum ("exp_avg_absmax", "exp_avg_sq_absmax", float32, one a
// block; the last block may be shorter). An update dequantises a block,
// runs AdamW's float32 step on it (AdamW's operations in AdamW's order),
// and quantises the new moments to the nearest code (ties up), each block
// by its new absolute maximum (at least 1e-12, as torchao clips it).
// Parameters of fewer than MinQuantized elements keep float32 moments,
// exactly AdamW's, as bitsandbytes' min_8bit_size does: biases and norms
// are a sliver of the bytes and the most sensitive to quantisation.
type AdamW8bit struct {
	Engine
	Beta1, Beta2, Eps, WeightDecay float32
	// MinQuantized is the fewest elements a parameter has for its moments
	// to be quantised (bitsandbytes' min_8bit_size: 4096).
	MinQuantized int
}

// Block8bit is the elements a quantisation block of AdamW8bit's moments
// covers, with one float32 absolute maximum.
const Block8bit = 256

// NewAdamW8bit returns 8-bit AdamW with AdamW's defaults (torch's) and
// learning rate lr. OnHost keeps the moments on the host.
func NewAdamW8bit(params []*ferry.Tensor, lr float32, opts ...Option) *AdamW8bit {
	o := &AdamW8bit{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MinQuantized: 4096}
	o.Init(o, params, lr, opts...)
	return o
}

func init() {
	defaults := map[string]float64{"min_8bit_size": 4096}
	for k, v := range adamDefaults {
		defaults[k] = v
	}
	Register(Registration{
		Name:     "adamw8bit",
		Summary:  "AdamW with both moments block-wise quantised to 8 bits (bitsandbytes, torchao); about 2 bytes a parameter",
		Defaults: defaults,
		Recipe:   adamRecipe,
		New: func(params []*ferry.Tensor, h map[string]float64, opts ...Option) (Optimizer, error) {
			if err := checkAdam("adamw8bit", h); err != nil {
				return nil, err
			}
			if v := h["min_8bit_size"]; v != math.Trunc(v) || v < 0 || v > 1<<40 {
				return nil, fmt.Errorf("adamw8bit: min_8bit_size must be a whole number of elements ≥ 0, got %v", v)
			}
			o := NewAdamW8bit(params, float32(h["lr"]), opts...)
			o.Beta1, o.Beta2, o.Eps, o.WeightDecay = float32(h["beta1"]), float32(h["beta2"]), float32(h["eps"]), float32(h["weight_decay"])
			o.MinQuantized = int(h["min_8bit_size"])
			return o, nil
		},
	})
}

// Name is "adamw8bit".
func (o *AdamW8bit) Name() string { return "adamw8bit" }

// Hyper lists beta1, beta2, eps, weight_decay and min_8bit_size.
func (o *AdamW8bit) Hyper() map[string]any {
	return map[string]any{"beta1": o.Beta1, "beta2": o.Beta2, "eps": o.Eps, "weight_decay": o.WeightDecay, "min_8bit_size": o.MinQuantized}
}

// quantized reports whether a parameter of n elements has 8-bit moments.
func (o *AdamW8bit) quantized(n int) bool { return n >= o.MinQuantized && n > 0 }

// Layout is codes and block maxima for each moment, and the step; float32
// moments for a parameter below MinQuantized.
func (o *AdamW8bit) Layout(shape []int) Layout {
	n := device.Numel(shape)
	if !o.quantized(n) {
		return adamLayout(shape)
	}
	blocks := []int{(n + Block8bit - 1) / Block8bit}
	return Layout{
		Slots: []Slot{
			{Name: "exp_avg_codes", DType: device.Uint8, Shape: shape},
			{Name: "exp_avg_absmax", DType: device.Float32, Shape: blocks},
			{Name: "exp_avg_sq_codes", DType: device.Uint8, Shape: shape},
			{Name: "exp_avg_sq_absmax", DType: device.Float32, Shape: blocks},
		},
		Step:  true,
		Grain: Block8bit,
		// Reads w, g and the codes, writes w and the codes; the maxima
		// are read and written once a block.
		Traffic: 16*int64(n) + 16*int64(blocks[0]),
	}
}

func (o *AdamW8bit) params(lr float32, step int) device.AdamWParams {
	return device.AdamWParams{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: step}
}

// The maps, made at the first 8-bit update.
var (
	qmapOnce                 sync.Once
	qmapSigned, qmapUnsigned *quantMap
)

func quantMaps() (*quantMap, *quantMap) {
	qmapOnce.Do(func() { qmapSigned, qmapUnsigned = newQuantMap(&qmapSignedBits), newQuantMap(&qmapUnsignedBits) })
	return qmapSigned, qmapUnsigned
}

// Update updates whole blocks of [lo, hi) (lo is a block's start).
func (o *AdamW8bit) Update(u *Update, lo, hi int) {
	hp := o.params(u.LR, u.Step)
	if len(u.State) == 2 { // float32 moments: AdamW's update
		optkernel.AdamWSerial(u.W[lo:hi], u.G[lo:hi], Float32s(u.State[0])[lo:hi], Float32s(u.State[1])[lo:hi], hp)
		return
	}
	c := newAdam8Consts(hp)
	qs, qu := quantMaps()
	cm, am, cv, av := u.State[0], Float32s(u.State[1]), u.State[2], Float32s(u.State[3])
	var m, v [Block8bit]float32
	for b0 := lo; b0 < hi; b0 += Block8bit {
		b1 := min(b0+Block8bit, hi)
		blk := b0 / Block8bit
		w, g := u.W[b0:b1], u.G[b0:b1]
		mb, vb := m[:b1-b0], v[:b1-b0]
		sm, sv := am[blk], av[blk]
		for i := range mb {
			mb[i] = qs.q[cm[b0+i]] * sm
			vb[i] = qu.q[cv[b0+i]] * sv
		}
		c.update(w, g, mb, vb)
		am[blk] = qs.quantizeBlock(cm[b0:b1], mb)
		av[blk] = qu.quantizeBlock(cv[b0:b1], vb)
	}
}

// adam8Consts are one step's constants, derived as AdamW's are
// (internal/optkernel), so that a block's float32 arithmetic is AdamW's.
type adam8Consts struct {
	decay, beta1, beta2, eps, bc2Sqrt, stepSize float32
}

func newAdam8Consts(p device.AdamWParams) adam8Consts {
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	return adam8Consts{decay: 1 - p.LR*p.WeightDecay, beta1: p.Beta1, beta2: p.Beta2, eps: p.Eps,
		bc2Sqrt: float32(math.Sqrt(bc2)), stepSize: float32(float64(p.LR) / bc1)}
}

// update is AdamW's step on one block's dequantised moments
// (internal/optkernel's adamwGo, operation for operation).
func (c *adam8Consts) update(w, g, m, v []float32) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i := range w {
		w[i] *= c.decay
		m[i] = m[i]*c.beta1 + g[i]*(1-c.beta1)
		v[i] = v[i]*c.beta2 + (1-c.beta2)*g[i]*g[i]
		denom := float32(math.Sqrt(float64(v[i])))/c.bc2Sqrt + c.eps
		w[i] += -c.stepSize * m[i] / denom
	}
}

// quantizeBlock writes x's codes into codes and returns the block's
// scale: its largest magnitude, at least 1e-12. Each code is quantize's,
// written out here so that the loop keeps its tables in registers.
func (m *quantMap) quantizeBlock(codes []byte, x []float32) float32 {
	var absmax float32
	for _, v := range x {
		absmax = max(absmax, float32(math.Abs(float64(v))))
	}
	absmax = max(absmax, 1e-12)
	q, half, start := &m.q, &m.half, m.start
	codes = codes[:len(x)]
	for i, v := range x {
		y := v / absmax
		if y != y {
			codes[i] = 0
			continue
		}
		c := int(start[orderKey(y)>>startShift])
		c += b2i(q[c+1] <= y)
		c += b2i(y-q[c] >= half[c])
		codes[i] = uint8(c)
	}
	return absmax
}

// quantize is the code of q's nearest value to x, ties to the higher
// (torchao's branch-free binary search and rounding): the largest c with
// q[c] ≤ x (0 when none, and for NaN), then c+1 when x is at least
// halfway to q[c+1]. It finds c from its map's start table
// (quantMap.start) and at most one step up, with the binary search's
// result (TestQuantizeMatchesBinarySearch).
func (m *quantMap) quantize(x float32) uint8 {
	if x != x {
		return 0
	}
	c := int(m.start[orderKey(x)>>startShift])
	c += b2i(m.q[c+1] <= x)
	c += b2i(x-m.q[c] >= m.half[c])
	return uint8(c)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// quantMap is a quantisation map with its start table: start[k] is the
// largest c with q[c] ≤ the least float32 whose orderKey>>startShift is k
// (0 when none). A bucket is 1/128 of a binade, and no bucket holds more
// than one of the map's values (newQuantMap checks), so for any x of
// bucket k the largest c with q[c] ≤ x is start[k] or start[k]+1.
type quantMap struct {
	q    [257]float32 // the map's 256 values, then NaN: q[c+1] ≤ x is false at c = 255
	half [256]float32 // (q[c+1]-q[c])·0.5, in float32 as torchao rounds; NaN at 255
	// start is indexed by orderKey(x)>>startShift.
	start []uint8
}

const startShift = 16

// orderKey maps float32s to uint32s in the same order (-0 just below +0).
// Branch-free: a sign is as likely as the other.
func orderKey(x float32) uint32 {
	b := math.Float32bits(x)
	return b ^ (uint32(int32(b)>>31) | 1<<31)
}

// bucketFloat is the float32 whose orderKey is key.
func bucketFloat(key uint32) float32 {
	if key>>31 != 0 {
		return math.Float32frombits(key &^ (1 << 31))
	}
	return math.Float32frombits(^key)
}

func newQuantMap(bits *[256]uint32) *quantMap {
	m := &quantMap{start: make([]uint8, 1<<(32-startShift))}
	for i, b := range bits {
		m.q[i] = math.Float32frombits(b)
	}
	m.q[256] = float32(math.NaN())
	for c := range 255 {
		m.half[c] = (m.q[c+1] - m.q[c]) * 0.5
	}
	m.half[255] = float32(math.NaN())
	c := 0
	for k := range m.start {
		least := bucketFloat(uint32(k) << startShift)
		if least == least { // (NaN buckets: quantize never looks)
			for c < 255 && m.q[c+1] <= least {
				c++
			}
		}
		m.start[k] = uint8(c)
		top := bucketFloat(uint32(k)<<startShift | (1<<startShift - 1))
		if top == top && c < 254 && m.q[c+2] <= top {
			panic("optim: a quantisation map has two values within 1/128 of a binade; lower startShift")
		}
	}
	return m
}
