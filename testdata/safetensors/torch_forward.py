#!/usr/bin/python3
"""Loads safetensors files that ferry wrote into PyTorch and prints the
forward outputs as JSON, a list of {"shape": [...], "values": [...]}, for
nn/safetensors_test.go (one run for several models: importing torch is
most of the time):

    torch_forward.py mlp|gpt WEIGHTS INPUTS [mlp|gpt WEIGHTS INPUTS ...]

WEIGHTS must carry ferry's checksums (st.read verifies them). INPUTS is a
file with "input" (mlp) or "tokens" (gpt). The state dict must fit the
model strictly, except that the tied lm_head.weight and the attention
masks (buffers) are not in ferry's files.
"""
import json
import sys

import torch

import gen
import st


def forward(kind, weights, inputs):
    sd, _ = st.read(weights, require_checksums=True)
    io, _ = st.read(inputs)
    model = gen.mlp() if kind == "mlp" else gen.GPT(gen.GPT_CONFIG).eval()
    res = model.load_state_dict(sd, strict=False)
    buffers = {n for n, _ in model.named_buffers()}
    missing = [n for n in res.missing_keys if n not in buffers and n != "lm_head.weight"]
    if missing or res.unexpected_keys:
        sys.exit(f"{weights}: missing {missing}, unexpected {res.unexpected_keys}")
    if kind == "mlp":
        out = model(io["input"])
    else:
        assert model.lm_head.weight is model.transformer.wte.weight, "the tie broke"
        out, _ = model(io["tokens"].long())
    return {"shape": list(out.shape), "values": out.flatten().tolist()}


def main(args):
    torch.set_grad_enabled(False)
    if not args or len(args) % 3:
        sys.exit(__doc__)
    json.dump([forward(*args[i:i + 3]) for i in range(0, len(args), 3)], sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
