package ferry_test

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"ferry"
	"ferry/device"
)

// The transformer ops against PyTorch 1.13: testdata/golden/gpt/ops.json,
// written by testdata/golden/gpt/gen.py, in the format of the core ops'
// golden file (inputs, output, upstream gradient G, input gradients).

func TestGoldenGPTOps(t *testing.T) {
	b, err := os.ReadFile("testdata/golden/gpt/ops.json")
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 testdata/golden/gpt/gen.py)", err)
	}
	var ops struct{ Cases []goldCase }
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops.Cases) < 30 {
		t.Fatalf("only %d cases", len(ops.Cases))
	}
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		for i := range ops.Cases {
			c := &ops.Cases[i]
			t.Run(c.Name, func(t *testing.T) {
				tol := caseTolerance(t, c)
				switch c.Op {
				case "attention", "qkv_attention", "heads_qkT", "layer_norm", "cross_entropy_3d", "embedding":
					// Sums over a row or a head dimension, like the
					// products and softmaxes caseTolerance covers by default.
					tol = caseTolerance(t, &goldCase{Op: "matmul", Inputs: c.Inputs, Out: c.Out, G: c.G})
					tol.atol *= 4
				}
				if c.Op == "layer_norm" {
					// x - mean loses the low bits of x in float32 (in
					// PyTorch too): relative to the spread, errors grow by
					// max|x| / the smallest row's standard deviation.
					tol.atol *= max(1, conditioning(t, &c.Inputs[0].goldTensor))
				}
				runGoldenCaseWith(t, dev, c, tol, applyGPTOp)
			})
		}
	})
}

func applyGPTOp(t *testing.T, c *goldCase, dev device.Device, x []*ferry.Tensor) *ferry.Tensor {
	heads := func(v *ferry.Tensor, h int) *ferry.Tensor { // [B, T, C] -> [B, H, T, C/H]
		s := v.Shape()
		r := v.Reshape(s[0], s[1], h, s[2]/h)
		defer r.Release()
		return r.Transpose(1, 2)
	}
	attrBool := func(k string) bool { v, _ := c.Attrs[k].(bool); return v }
	attrInt := func(k string) int { return int(c.Attrs[k].(float64)) }
	switch c.Op {
	case "embedding":
		return ferry.Embedding(x[0], x[1])
	case "layer_norm":
		var w, b *ferry.Tensor
		i := 1
		if v, ok := c.Attrs["weight"]; !ok || v.(bool) {
			w, i = x[i], i+1
		}
		if v, ok := c.Attrs["bias"]; !ok || v.(bool) {
			b = x[i]
		}
		return ferry.LayerNorm(x[0], w, b, attrFloat(c, "eps"))
	case "narrow":
		return x[0].Narrow(attrInt("dim"), attrInt("start"), attrInt("length"))
	case "split":
		pieces := x[0].Split(attrInt("size"), attrInt("dim"))
		defer releaseAll(pieces...)
		if _, ok := c.Attrs["index"]; ok {
			return pieces[attrInt("index")].Contiguous()
		}
		rev := make([]*ferry.Tensor, len(pieces))
		for i, p := range pieces {
			rev[len(pieces)-1-i] = p
		}
		return ferry.Cat(attrInt("dim"), rev...)
	case "cat":
		return ferry.Cat(attrInt("dim"), x...)
	case "permute":
		return x[0].Permute(attrInts(c, "dims")...)
	case "heads_qkT":
		q, k := heads(x[0], attrInt("heads")), heads(x[1], attrInt("heads"))
		defer releaseAll(q, k)
		kt := k.T()
		defer kt.Release()
		return ferry.MatMul(q, kt)
	case "merge_heads":
		s := x[0].Shape()
		y := x[0].Transpose(1, 2)
		defer y.Release()
		return y.Reshape(s[0], s[2], s[1]*s[3])
	case "attention":
		return ferry.ScaledDotProductAttention(x[0], x[1], x[2], ferry.AttentionOptions{Causal: attrBool("causal"), Scale: attrFloat(c, "scale")})
	case "qkv_attention":
		C, h := attrInt("embd"), attrInt("heads")
		parts := x[0].Split(C, 2)
		defer releaseAll(parts...)
		q, k, v := heads(parts[0], h), heads(parts[1], h), heads(parts[2], h)
		defer releaseAll(q, k, v)
		y := ferry.ScaledDotProductAttention(q, k, v, ferry.AttentionOptions{Causal: true})
		defer y.Release()
		yt := y.Transpose(1, 2)
		defer yt.Release()
		s := x[0].Shape()
		return yt.Reshape(s[0], s[1], C)
	case "cross_entropy_3d":
		return ferry.CrossEntropy(x[0], x[1])
	}
	return applyOp(t, c, dev, x)
}

// conditioning is max|x| over the smallest standard deviation of a row
// (the last axis) of x.
func conditioning(t *testing.T, x *goldTensor) float64 {
	v := x.float32s(t)
	C := x.Shape[len(x.Shape)-1]
	minStd, maxAbs := math.Inf(1), 0.0
	for r := 0; r+C <= len(v); r += C {
		var m, s float64
		for _, e := range v[r : r+C] {
			m += float64(e)
			maxAbs = max(maxAbs, math.Abs(float64(e)))
		}
		m /= float64(C)
		for _, e := range v[r : r+C] {
			s += (float64(e) - m) * (float64(e) - m)
		}
		minStd = min(minStd, math.Sqrt(s/float64(C)))
	}
	return maxAbs / max(minStd, 1e-30)
}
