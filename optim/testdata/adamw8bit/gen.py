"""Writes the 8-bit AdamW quantisation maps and golden data for package optim.

Run from the repository root with Debian's PyTorch (apt-get install -y
python3-torch):

    /usr/bin/python3 optim/testdata/adamw8bit/gen.py

It writes
  optim/qmap_table.go                    the signed and unsigned dynamic maps,
                                         as PyTorch evaluates bitsandbytes'
                                         create_dynamic_map (float32 bits);
  optim/testdata/adamw8bit/golden.json.gz  ten steps of the reference below
                                         on odd-sized parameters: after each
                                         step the parameters and the quantised
                                         state (codes and block absmax), each
                                         array base64 of its little-endian
                                         bytes. The initial parameters and the
                                         gradients are drawn by value(), which
                                         the Go test computes too.

The reference is written from the published algorithm, not from ferry:
Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (2110.02861),
section 2.1 and equation 4, as bitsandbytes (functional.create_dynamic_map)
and torchao (prototype/low_bit_optim, AdamW8bit: quantize_8bit_with_qmap's
branch-free binary search with round-half-up, dequant_with_qmap) implement it:

  for each block of 256 elements (the last may be shorter):
    m = QMAP_SIGNED[codes_m] * absmax_m,  v = QMAP_UNSIGNED[codes_v] * absmax_v
    p = p * (1 - lr*wd)
    m = m*beta1 + g*(1 - beta1)           (torch.optim.AdamW, PyTorch 1.13,
    v = v*beta2 + ((1 - beta2)*g)*g        single-tensor, float32 throughout)
    p = p + (-lr/bc1 * m) / (sqrt(v)/sqrt(bc2) + eps)
    absmax = max(|x| over the block, 1e-12);  codes = nearest(x / absmax)

Parameters with fewer than min_8bit_size (4096) elements keep float32
moments, as bitsandbytes' min_8bit_size does. The scalars are rounded to
float32 as the optimizer holds them (lr, betas, eps, weight decay), and the
per-step constants are derived from them as torch.optim.AdamW derives them
(in double, then used as float32).
"""
import base64
import gzip
import json
import math
import os
import struct

import numpy as np
import torch


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    # bitsandbytes functional.create_dynamic_map, as torchao copies it.
    data = []
    non_sign_bits = total_bits - (1 if signed else 1)
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    if additional_items > 0:
        boundaries = torch.linspace(0.1, 1, additional_items + 1)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


QS, QU = create_dynamic_map(True), create_dynamic_map(False)
BLOCK = 256
MIN_8BIT = 4096


def f32(x):
    return float(np.float32(x))


def bits(t):
    return [struct.unpack('<I', struct.pack('<f', v))[0] for v in t.tolist()]


def quantize(x, q):
    # torchao quantize_8bit_with_qmap, implementation 1 (x already divided
    # by the block's absmax).
    codes = torch.where(x >= q[128], 128, 0)
    for s in (64, 32, 16, 8, 4, 2, 1):
        codes = codes + torch.where(x >= q[codes + s], s, 0)
    up = (codes + 1).clip(max=255)
    lo, hi = q[codes], q[up]
    codes = torch.where(x - lo >= (hi - lo) * torch.tensor(0.5), up, codes)
    return codes.to(torch.uint8)


def blockwise(x, q, absmax_out):
    n = x.numel()
    codes = torch.empty(n, dtype=torch.uint8)
    for b0 in range(0, n, BLOCK):
        blk = x[b0:b0 + BLOCK]
        a = blk.abs().max().clamp(min=1e-12)
        absmax_out[b0 // BLOCK] = a
        codes[b0:b0 + BLOCK] = quantize(blk / a, q)
    return codes


def dequant(codes, absmax, q):
    scale = absmax.repeat_interleave(BLOCK)[:codes.numel()]
    return q[codes.long()] * scale


class Param:
    def __init__(self, n):
        self.n = n
        self.quantised = n >= MIN_8BIT
        nb = (n + BLOCK - 1) // BLOCK
        if self.quantised:
            self.cm = torch.zeros(n, dtype=torch.uint8)
            self.cv = torch.zeros(n, dtype=torch.uint8)
            self.am = torch.zeros(nb, dtype=torch.float32)
            self.av = torch.zeros(nb, dtype=torch.float32)
        else:
            self.m = torch.zeros(n, dtype=torch.float32)
            self.v = torch.zeros(n, dtype=torch.float32)

    def step(self, g, lr, b1, b2, eps, wd, t):
        # Constants as torch.optim.AdamW 1.13's single-tensor step makes
        # them from float32 hyperparameters.
        bc1 = 1 - float(b1) ** t
        bc2 = 1 - float(b2) ** t
        step_size = torch.tensor(f32(float(lr) / bc1))
        bc2_sqrt = torch.tensor(f32(math.sqrt(bc2)))
        decay = torch.tensor(np.float32(1) - np.float32(lr) * np.float32(wd))
        b1t, b2t = torch.tensor(b1), torch.tensor(b2)
        omb1, omb2 = torch.tensor(np.float32(1) - b1), torch.tensor(np.float32(1) - b2)
        if self.quantised:
            m, v = dequant(self.cm, self.am, QS), dequant(self.cv, self.av, QU)
        else:
            m, v = self.m, self.v
        self.p = self.p * decay
        m = m * b1t + g * omb1
        v = v * b2t + (omb2 * g) * g
        denom = torch.sqrt(v) / bc2_sqrt + torch.tensor(eps)
        self.p = self.p + (-step_size * m) / denom
        if self.quantised:
            self.cm = blockwise(m, QS, self.am)
            self.cv = blockwise(v, QU, self.av)
        else:
            self.m, self.v = m, v


def value(seed, i):
    """A float32 drawn from (seed, i) by splitmix64, exactly reproducible:
    a 24-bit fraction in [-1, 1) times 2^-k, k in [0, 13]."""
    m = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + i + 1) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    frac = ((z >> 40) / float(1 << 24)) * 2 - 1  # exact in float32
    return np.float32(frac * 2.0 ** -((z >> 8) % 14))


def draw(seed, n, zeros=False):
    v = np.array([value(seed, i) for i in range(n)], dtype=np.float32)
    if zeros:
        v[::97] = 0  # some exact zeros
        v[256:512] = 0  # a whole block: its moments stay 0, scaled by 1e-12
    return torch.tensor(v)


def b64(t):
    return base64.b64encode(t.numpy().tobytes()).decode()


def golden():
    sizes = [4099, 4353, 300]  # partial last blocks; 300 keeps float32 moments
    lr, b1, b2, eps, wd = np.float32(1e-2), np.float32(0.9), np.float32(0.95), np.float32(1e-8), np.float32(0.1)
    params = []
    for k, n in enumerate(sizes):
        p = Param(n)
        p.p = draw(1000 + k, n)
        params.append(p)
    out = {"sizes": sizes, "lr": float(lr), "beta1": float(b1), "beta2": float(b2), "eps": float(eps),
           "weight_decay": float(wd), "min_8bit_size": MIN_8BIT, "block": BLOCK, "steps": []}
    for t in range(1, 11):
        rec = []
        for k, p in enumerate(params):
            g = draw(100 * t + k, p.n, zeros=True)
            p.step(g, lr, b1, b2, eps, wd, t)
            r = {"param": b64(p.p)}
            if p.quantised:
                r.update(exp_avg_codes=b64(p.cm), exp_avg_absmax=b64(p.am),
                         exp_avg_sq_codes=b64(p.cv), exp_avg_sq_absmax=b64(p.av))
            else:
                r.update(exp_avg=b64(p.m), exp_avg_sq=b64(p.v))
            rec.append(r)
        out["steps"].append(rec)
    return out


def write_table(path):
    with open(path, "w") as f:
        f.write("// Code generated by optim/testdata/adamw8bit/gen.py; DO NOT EDIT.\n\n")
        f.write("package optim\n\n")
        f.write("// The dynamic quantisation maps of 8-bit AdamW (bitsandbytes'\n")
        f.write("// create_dynamic_map, signed for the first moment, unsigned for the\n")
        f.write("// second), as float32 bits: 256 sorted values in [-1, 1] and [0, 1].\n")
        for name, q in (("qmapSignedBits", QS), ("qmapUnsignedBits", QU)):
            f.write("var %s = [256]uint32{\n" % name)
            b = bits(q)
            for i in range(0, 256, 8):
                f.write("\t" + ", ".join("0x%08x" % x for x in b[i:i + 8]) + ",\n")
            f.write("}\n")
            if name == "qmapSignedBits":
                f.write("\n")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    write_table(os.path.join(here, "..", "..", "qmap_table.go"))
    data = json.dumps(golden(), separators=(",", ":")).encode()
    with open(os.path.join(here, "golden.json.gz"), "wb") as f:
        f.write(gzip.compress(data, mtime=0))
