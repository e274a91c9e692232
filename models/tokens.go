package models

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/device"
)

// RandomTokens is a language model's step data for the demo and the
// planner: batch × seq token ids on dev and targets on dev's host, uniform
// over vocab, drawn from seed (zeros on a device without values).
func RandomTokens(dev device.Device, seed uint64, batch, seq, vocab int) (input, target *ferry.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 0x1277))
	n := batch * seq
	tok, tgt := make([]int32, n), make([]int32, n)
	if device.HasData(dev) {
		for i := range tok {
			tok[i], tgt[i] = int32(rng.IntN(vocab)), int32(rng.IntN(vocab))
		}
	}
	return ferry.FromInt32s(dev, tok, batch, seq), ferry.FromInt32s(dev.Host(), tgt, batch, seq)
}

// SmallerSequences are a language model's smaller sizes: the batch
// halved, then the sequence halved (down to 16) at the batch of s.
func SmallerSequences(s Sizes) []Variant {
	with := func(name string, v int) Sizes {
		c := Sizes{}
		for k, x := range s {
			c[k] = x
		}
		c[name] = float64(v)
		return c
	}
	var vs []Variant
	for b := s.Int("batch") / 2; b >= 1; b /= 2 {
		vs = append(vs, Variant{Change: fmt.Sprintf("batch %d", b), Sizes: with("batch", b)})
	}
	for q := s.Int("seq") / 2; q >= 16; q /= 2 {
		vs = append(vs, Variant{Change: fmt.Sprintf("sequence %d at batch %d", q, s.Int("batch")), Sizes: with("seq", q)})
	}
	return vs
}
