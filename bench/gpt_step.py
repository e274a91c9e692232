#!/usr/bin/python3
"""PyTorch's side of bench/gpt_step.sh: times training steps of nanoGPT's
"baby GPT" (bench/nanogpt_model.py: 6 layers, 6 heads, embedding 384,
sequence 256, vocabulary 65, batch 8, dropout 0, tanh GELU, bias) on the
CPU, float32: forward, cross-entropy on random targets, backward, AdamW
(model.py's configure_optimizers: lr 1e-3, weight decay 0.1 on the 2-D
parameters), zero_grad(set_to_none=True). Two threads (this machine has two
cores), as ferry uses.

Run it as bench/gpt_step.sh does for a fair figure: with OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE unset (set, they force OpenBLAS's slower AVX2 kernel)
and glibc's MALLOC_MMAP_THRESHOLD_ (to 32 MiB: glibc ignores more than
that on 64-bit machines, so "4 GiB" leaves the default in place),
MALLOC_TRIM_THRESHOLD_ and MALLOC_TOP_PAD_ raised: else every step
page-faults in its activations afresh (tens of thousands of minor faults per
step, which the step lines print) and steps swing by seconds. With them the
faults stop after the warm-up steps.

Usage: python3 bench/gpt_step.py [layers heads embd seq vocab batch steps warmup]
       (defaults 6 6 384 256 65 8 5 5: 5 untimed steps, then 5 timed ones)
Prints one line per timed step ("step <seconds> cpu <CPU seconds of all
threads> loss <loss> page faults <minor faults in the step>"), then
"median <seconds>" and "median_cpu <CPU seconds>".
"""
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanogpt_model import GPT, GPTConfig  # noqa: E402

L, H, C, T, V, B, S, W = (list(map(int, sys.argv[1:9])) + [6, 6, 384, 256, 65, 8, 5, 5][len(sys.argv) - 1:])[:8]
torch.set_num_threads(2)
torch.manual_seed(0)
model = GPT(GPTConfig(vocab=V, seq=T, layers=L, heads=H, embd=C, dropout=0.0)).train()
opt = model.optimizer(lr=1e-3)
x = torch.randint(0, V, (B, T))
y = torch.randint(0, V, (B, T))


def step():
    _, loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


env = " ".join(f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ATEN_CPU_CAPABILITY", "MALLOC_MMAP_THRESHOLD_",
                                               "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_") if k in os.environ)
print(f"pytorch {torch.__version__}: GPT {L} layers, {H} heads, embd {C}, seq {T}, vocab {V}, batch {B}, "
      f"threads {torch.get_num_threads()}, env [{env}]")
for _ in range(W):
    step()
ts, cs = [], []
for _ in range(S):
    f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    s, c = time.perf_counter(), time.process_time()
    loss = step()
    ts.append(time.perf_counter() - s)
    cs.append(time.process_time() - c)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f
    print(f"step {ts[-1]:.4f} cpu {cs[-1]:.4f} loss {loss.item():.4f} page faults {faults}")
print(f"median {sorted(ts)[len(ts) // 2]:.4f}")
print(f"median_cpu {sorted(cs)[len(cs) // 2]:.4f}")
