#!/usr/bin/python3
"""Golden safetensors files from PyTorch, for nn/safetensors_test.go.

Run from the repository root with Debian's PyTorch 1.13:

    /usr/bin/python3 testdata/safetensors/gen.py

It writes, beside this script, files as PyTorch writes them (no
checksums; written by st.py, which follows the safetensors package):

  mlp.safetensors     Sequential(Linear(8,16), ReLU(), Linear(16,4)):
                      0.weight, 0.bias, 2.weight, 2.bias
  mlp_io.safetensors  input [3, 8] and output [3, 4] of its forward
  gpt.safetensors     a GPT with nanoGPT's structure (bench/nanogpt_model.py:
                      vocab 50, seq 16, 2 layers, 2 heads, embd 32, bias,
                      dropout 0), named_parameters(): the tied head once,
                      as transformer.wte.weight; the config in __metadata__
  gpt_io.safetensors  tokens [2, 16] (I32) and logits [2, 16, 50]

torch_forward.py is the other direction: it loads a file ferry wrote and
prints PyTorch's forward output. Seeds are fixed.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import st  # noqa: E402
from nanogpt_model import GPT, GPTConfig  # noqa: E402

GPT_CONFIG = GPTConfig(vocab=50, seq=16, layers=2, heads=2, embd=32, dropout=0.0, bias=True)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def main():
    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    m = mlp()
    x = torch.randn(3, 8)
    st.write(os.path.join(HERE, "mlp.safetensors"), dict(m.named_parameters()), {"format": "pt"})
    st.write(os.path.join(HERE, "mlp_io.safetensors"), {"input": x, "output": m(x)})

    torch.manual_seed(1)
    g = GPT(GPT_CONFIG).eval()
    tokens = torch.randint(0, GPT_CONFIG.vocab, (2, GPT_CONFIG.seq))
    logits, _ = g(tokens)
    c = GPT_CONFIG
    meta = {"format": "pt", "vocab": str(c.vocab), "seq": str(c.seq), "layers": str(c.layers),
            "heads": str(c.heads), "embd": str(c.embd)}
    st.write(os.path.join(HERE, "gpt.safetensors"), dict(g.named_parameters()), meta)
    st.write(os.path.join(HERE, "gpt_io.safetensors"), {"tokens": tokens.to(torch.int32), "logits": logits})


if __name__ == "__main__":
    main()
