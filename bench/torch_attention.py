#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention timed at the shape ferry's BenchmarkRealAttention uses.

Causal attention on [B, H, T, D] = [8, 12, 1024, 64] (GPT-2 124M at batch
8), forward alone and forward with backward, in float32 (what ferry's
kernels compute today) and, for reference, bfloat16. PyTorch picks its
backend (flash, memory-efficient or math) as it would in a model; the
backend it can use is printed. The tflops figure counts 4·B·H·T²·D flops
for the forward, halved when causal, and 2.5 times that for backward, as
device/cuda's benchmark does, so the two are comparable.

    python3 bench/torch_attention.py [--json FILE]
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F


def time_it(fn, reps):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_attention.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    B, H, T, D = a.batch, a.heads, a.seq, a.dim
    fwd_flops = 4.0 * B * H * T * T * D / 2
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "shape": [B, H, T, D], "causal": True, "runs": []}
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=g, requires_grad=True) for _ in range(3))
        do = torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=g)

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(do)

        name = str(dtype).replace("torch.", "")
        for what, fn, flops in (("forward", fwd, fwd_flops), ("forward+backward", fwd_bwd, fwd_flops * 3.5)):
            s = time_it(fn, a.reps)
            r = {"dtype": name, "pass": what, "seconds": s, "tflops": flops / s / 1e12}
            res["runs"].append(r)
            print(f"sdpa {name:<8} {what:<17} {s * 1e3:8.3f} ms  {r['tflops']:6.1f} TFLOP/s", flush=True)
        del q, k, v, do
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
