#!/usr/bin/python3
"""Writes bf16_golden.json: float32 bit patterns and the bfloat16 bits
PyTorch rounds them to (tensor.to(torch.bfloat16)), for device's
ToBFloat16 test. Edge cases (ties, signed zeros, subnormals, the largest
finite values, infinities, NaN payloads) and pseudo-random patterns.

    /usr/bin/python3 device/testdata/bf16_golden.py
"""
import json
import os
import random
import struct

import torch

cases = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
    0x3F800000, 0xBF800000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F817FFF,
    0x3F818001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F800000,
    0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x7FC00001,
    0xFF800001, 0x00008000, 0x00018000, 0x00010000, 0x0000FFFF, 0x40490FDB,
]
rng = random.Random(1)
cases += [rng.getrandbits(32) for _ in range(2000)]
# Ties to even in every region of the range: low half exactly 0x8000.
cases += [(rng.getrandbits(16) << 16) | 0x8000 for _ in range(200)]

bits = torch.tensor([struct.unpack("<f", struct.pack("<I", c))[0] for c in cases], dtype=torch.float32)
# Read the float32 bits back from the tensor (NaN payloads survive the
# round trip through Python floats on this platform only sometimes), and
# the bfloat16 bits of the conversion.
f32 = bits.view(torch.int32).tolist()
b16 = bits.to(torch.bfloat16).view(torch.int16).tolist()
out = [[c & 0xFFFFFFFF, b & 0xFFFF] for c, b in zip(f32, b16)]
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16_golden.json")
with open(path, "w") as f:
    json.dump({"torch": torch.__version__, "pairs": out}, f)
print(f"{len(out)} pairs written to {path} (torch {torch.__version__})")
