#!/usr/bin/env python3
"""PyTorch's bfloat16 matrix product on the CPU against its float32 one,
and against ferry's bfloat16 rule (bfloat16 operands, float32 sums).

Speed: a 1024^3 product, float32 and bfloat16 operands (torch.matmul; with
a CPU that has AVX512_BF16, oneDNN's kernel), alternating, median of
REPEATS. Accuracy: max |C - C64| / max |C64| with C64 the float64 product of
the bfloat16-rounded operands, so the error is the product's alone: ferry's
rule gives float32 rounding error there (~1e-7); a product that accumulates
in bfloat16 gives ~1e-2.

Usage: /usr/bin/python3 bench/torch_bf16_matmul.py [n [repeats]]
Run it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (float32 at its
best on this machine).
"""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.manual_seed(0)
a = torch.randn(n, n)
b = torch.randn(n, n)
ab, bb = a.bfloat16(), b.bfloat16()
ref = ab.double() @ bb.double()


def rate(f):
    for _ in range(3):
        f()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return 2 * n ** 3 / ts[len(ts) // 2] / 1e9


f32 = rate(lambda: a @ b)
b16 = rate(lambda: ab @ bb)
with torch.autocast("cpu", dtype=torch.bfloat16):
    auto = rate(lambda: a @ b)
    c_auto = (a @ b).double()
err = lambda c: ((c - ref).abs().max() / ref.abs().max()).item()
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {n}^3")
print(f"float32 matmul:            {f32:8.1f} GFLOP/s")
print(f"bfloat16 matmul:           {b16:8.1f} GFLOP/s  ({b16 / f32:.2f}x float32)  error {err((ab @ bb).double()):.2e}")
print(f"autocast(bfloat16) matmul: {auto:8.1f} GFLOP/s  ({auto / f32:.2f}x float32)  error {err(c_auto):.2e}")
print(f"float32 sums of the bf16 operands (ferry's rule): error {err((ab.float() @ bb.float()).double()):.2e}")
