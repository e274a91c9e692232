#!/usr/bin/env python3
"""PyTorch's side of bench/cpu_step.sh: times training steps of the origin
model on the CPU exactly as bench/cpustep does for ferry: L x (Linear(W, W)
+ ReLU) in nn.Sequential, batch B, MSE loss, SGD (lr 1e-3),
zero_grad(set_to_none=True).

Usage: python3 bench/cpu_step.py [layers width batch steps]
       (a python3 with PyTorch; bench/cpu_step.sh takes it from $PYTHON)
Prints one line per timed step ("step <seconds>"), then "median <seconds>".
"""
import statistics
import sys
import time

import torch
import torch.nn as nn

L, W, B, S = (list(map(int, sys.argv[1:5])) + [40, 1024, 256, 5][len(sys.argv) - 1:])[:4]
torch.manual_seed(0)
m = nn.Sequential(*[nn.Sequential(nn.Linear(W, W), nn.ReLU()) for _ in range(L)])
x, t = torch.randn(B, W), torch.randn(B, W)
opt = torch.optim.SGD(m.parameters(), lr=1e-3)


def step():
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(m(x), t).backward()
    opt.step()


print(f"pytorch {torch.__version__}: {L} x Linear({W})+ReLU, batch {B}, threads {torch.get_num_threads()}")
step()
ts = []
for _ in range(S):
    s = time.perf_counter()
    step()
    ts.append(time.perf_counter() - s)
    print(f"step {ts[-1]:.4f}")
print(f"median {sorted(ts)[len(ts) // 2]:.4f}")
