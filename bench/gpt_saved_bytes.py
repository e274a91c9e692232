#!/usr/bin/python3
"""Counts the bytes PyTorch 1.13's eager autograd saves for backward in a
nanoGPT GPT (bench/nanogpt_model.py: tanh GELU, dropout 0, the slow-path
attention that model.py runs before PyTorch 2.0), per block and in total,
float32 on the CPU, in training mode.

How it counts: torch.autograd.graph.saved_tensors_hooks sees every tensor a
forward op saves for backward. A tensor is counted by its storage (data
pointer), once, however many ops save it or views of it, at the storage's
full size; storages of parameters (weights, biases, the tied wte/lm_head)
are excluded, buffers (the causal mask) and everything else are counted.
Each storage is charged to the block that saved it first (forward pre-hooks
on every transformer.h[i] say which block runs), or to "outside" (the
embeddings, ln_f, lm_head and the loss). A block's own input (the residual
stream, saved by its ln_1) is charged to it.

Memory: GPT-2 124M at batch 8 x 1024 saves about 24 GB in float32, more than
this machine should give one process. So the script builds the model with
--count-layers blocks (default 1: every block saves the same), runs it at
two small batches (--fit-batches, default 1 and 2) and fits
bytes(B) = fixed + per_sample * B for every block and for "outside" (each
saved tensor has the batch as a factor of its size, or none: the mask is
T x T); it prints the fit's two points and its value at --batch, and checks
a third batch against the fit (--check-batch). --direct runs the whole
model at --batch instead, for configurations that fit in memory.

Usage: python3 bench/gpt_saved_bytes.py [--vocab 50257 --seq 1024
       --layers 12 --heads 12 --embd 768 --batch 8] [--direct] [-v]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanogpt_model import GPT, GPTConfig  # noqa: E402


def count(cfg, batch, seq, verbose=False):
    """Runs forward and the loss at batch x seq; returns the saved bytes
    charged to each block (a list) and to "outside"."""
    torch.manual_seed(0)
    model = GPT(cfg).train()
    params = {p.storage().data_ptr() for p in model.parameters()}
    where = ["outside"]
    seen = {}  # storage data pointer -> (owner, bytes)

    def pre(i):
        def hook(mod, inp):
            where[0] = i
        return hook

    def post(mod, inp, out):
        where[0] = "outside"

    for i, blk in enumerate(model.transformer.h):
        blk.register_forward_pre_hook(pre(i))
        blk.register_forward_hook(post)

    def pack(t):
        s = t.storage()
        ptr = s.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = (where[0], s.nbytes())
            if verbose:
                print(f"  {str(where[0]):>7} {str(t.dtype):>13} {str(list(t.shape)):>22} {s.nbytes():>12}")
        return t

    idx = torch.randint(0, cfg.vocab, (batch, seq))
    tgt = torch.randint(0, cfg.vocab, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, loss = model(idx, tgt)
    per_block = [0] * cfg.layers
    outside = 0
    for owner, n in seen.values():
        if owner == "outside":
            outside += n
        else:
            per_block[owner] += n
    del logits, loss
    return per_block, outside


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=1024, help="block size and sequence length T")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--count-layers", type=int, default=1, help="blocks built for the fit")
    ap.add_argument("--fit-batches", type=int, nargs=2, default=[1, 2])
    ap.add_argument("--check-batch", type=int, default=3, help="0: no check")
    ap.add_argument("--direct", action="store_true", help="run the whole model at --batch, no fit")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every saved storage")
    a = ap.parse_args()
    torch.set_num_threads(2)
    full = GPTConfig(vocab=a.vocab, seq=a.seq, layers=a.layers, heads=a.heads, embd=a.embd, dropout=0.0)
    print(f"pytorch {torch.__version__}: GPT vocab {a.vocab} seq {a.seq} layers {a.layers} heads {a.heads} "
          f"embd {a.embd}, batch {a.batch}, float32, dropout 0 (training mode), tanh GELU, slow-path attention")
    if a.direct:
        blocks, outside = count(full, a.batch, a.seq, a.verbose)
        for i, n in enumerate(blocks):
            print(f"block {i}: {n} bytes ({n / 2**20:.1f} MiB)")
        per_block = max(blocks)
        if min(blocks) != per_block:
            print(f"blocks differ: min {min(blocks)} max {per_block}")
    else:
        small = GPTConfig(vocab=a.vocab, seq=a.seq, layers=a.count_layers, heads=a.heads, embd=a.embd, dropout=0.0)
        b1, b2 = a.fit_batches
        blk1, out1 = count(small, b1, a.seq, a.verbose)
        blk2, out2 = count(small, b2, a.seq, a.verbose)
        assert len(set(blk1)) == 1 and len(set(blk2)) == 1, (blk1, blk2)

        def fit(y1, y2, b):
            slope = (y2 - y1) // (b2 - b1)
            return y1 + slope * (b - b1), slope, y1 - slope * b1

        per_block, slope, fixed = fit(blk1[0], blk2[0], a.batch)
        outside, oslope, ofixed = fit(out1, out2, a.batch)
        print(f"fit over batches {b1}, {b2} ({a.count_layers} block(s) built):")
        print(f"  per block: {fixed} + {slope} x batch bytes; outside the blocks: {ofixed} + {oslope} x batch")
        if a.check_batch:
            blk3, out3 = count(small, a.check_batch, a.seq)
            ok = blk3[0] == fit(blk1[0], blk2[0], a.check_batch)[0] and out3 == fit(out1, out2, a.check_batch)[0]
            print(f"  check at batch {a.check_batch}: measured block {blk3[0]}, outside {out3}: "
                  f"{'equal to the fit' if ok else 'DIFFERS from the fit'}")
            if not ok:
                sys.exit(1)
    total = per_block * a.layers + outside
    print(f"saved bytes per block: {per_block} ({per_block / 2**20:.1f} MiB)")
    print(f"saved bytes outside the blocks (embeddings, ln_f, lm_head, loss): {outside} ({outside / 2**20:.1f} MiB)")
    print(f"saved bytes total: {total} ({total / 2**30:.3f} GiB)")


if __name__ == "__main__":
    main()
