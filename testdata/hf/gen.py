#!/usr/bin/python3
"""Golden files in Hugging Face's naming and layout, for nn/safetensors_hf_test.go.

Run from the repository root with Debian's PyTorch 1.13:

    /usr/bin/python3 testdata/hf/gen.py

A GPT-2-shaped model (bench/nanogpt_model.py: vocab 50, seq 16, 2 layers,
2 heads, embd 32, bias, tanh GELU, dropout 0, tied head), its weights drawn
larger than GPT-2's init so that every term shows, written as Hugging
Face's GPT2Model / GPT2LMHeadModel write them: h.N.ln_1.weight,
h.N.attn.c_attn.weight, ..., wte.weight, wpe.weight, ln_f.weight, the four
projections of each block (Conv1D) transposed to [in, out], and the causal
mask buffers h.N.attn.bias [1, 1, seq, seq] and h.N.attn.masked_bias []
that Hugging Face's older files carry. Files, beside this script (by
../safetensors/st.py):

  gpt2.safetensors        F32, GPT2Model's names (no prefix), with buffers
  gpt2_lm_bf16.safetensors  BF16, GPT2LMHeadModel's names (transformer.
                          prefix) with lm_head.weight beside the tied
                          transformer.wte.weight, with buffers
  gpt2_f16.safetensors    F16, no prefix, no buffers
  gpt2_io.safetensors     tokens [2, 16] (I32); logits: PyTorch's for the
                          float32 weights; logits_bf16 and logits_f16:
                          PyTorch's (in float32) for the weights rounded
                          to bfloat16 and float16

The config is in each weight file's __metadata__. Seeds are fixed.
"""
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "safetensors"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import st  # noqa: E402
from nanogpt_model import GPT, GPTConfig  # noqa: E402

CONFIG = GPTConfig(vocab=50, seq=16, layers=2, heads=2, embd=32, dropout=0.0, bias=True)
CONV1D = re.compile(r"^h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")


def hf_names(model, dtype, prefix, buffers, lm_head):
    """The model's parameters under Hugging Face's GPT-2 names, in dtype."""
    out = {}
    for name, p in model.named_parameters():
        base = name[len("transformer."):]
        t = p.detach()
        if CONV1D.match(base):
            t = t.t()
        out[prefix + base] = t.contiguous().to(dtype)
    if lm_head:
        out["lm_head.weight"] = model.transformer.wte.weight.detach().to(dtype)
    if buffers:
        s = CONFIG.seq
        for i in range(CONFIG.layers):
            out[f"{prefix}h.{i}.attn.bias"] = torch.tril(torch.ones(s, s, dtype=dtype)).view(1, 1, s, s)
            out[f"{prefix}h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=dtype)
    return out


def logits_with(model, dtype, tokens):
    """PyTorch's float32 logits for the model's weights rounded to dtype."""
    with torch.no_grad():
        saved = {n: p.detach().clone() for n, p in model.named_parameters()}
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))
        logits, _ = model(tokens)
        for n, p in model.named_parameters():
            p.copy_(saved[n])
    return logits


def main():
    torch.set_grad_enabled(False)
    torch.set_num_threads(2)
    torch.manual_seed(3)
    g = GPT(CONFIG).eval()
    for name, p in g.named_parameters():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            p.copy_(1 + 0.1 * torch.randn_like(p))
        elif p.dim() == 1:
            p.normal_(0, 0.1)
        else:
            p.normal_(0, 0.2)
    tokens = torch.randint(0, CONFIG.vocab, (2, CONFIG.seq))
    logits, _ = g(tokens)
    c = CONFIG
    meta = {"format": "pt", "vocab": str(c.vocab), "seq": str(c.seq), "layers": str(c.layers),
            "heads": str(c.heads), "embd": str(c.embd)}
    st.write(os.path.join(HERE, "gpt2.safetensors"), hf_names(g, torch.float32, "", True, False), meta)
    st.write(os.path.join(HERE, "gpt2_lm_bf16.safetensors"), hf_names(g, torch.bfloat16, "transformer.", True, True), meta)
    st.write(os.path.join(HERE, "gpt2_f16.safetensors"), hf_names(g, torch.float16, "", False, False), meta)
    st.write(os.path.join(HERE, "gpt2_io.safetensors"), {
        "tokens": tokens.to(torch.int32),
        "logits": logits,
        "logits_bf16": logits_with(g, torch.bfloat16, tokens),
        "logits_f16": logits_with(g, torch.float16, tokens),
    })


if __name__ == "__main__":
    main()
