"""A minimal safetensors reader and writer with json and struct, for
PyTorch installs without the safetensors package (Debian's PyTorch 1.13).

read() verifies ferry's per-tensor CRC-32C ("ferry.crc32c" in
__metadata__: a JSON object name -> 8 hex digits) when present;
write() records none, as PyTorch's own writer does.
"""
import json
import struct

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def write(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor, laid out as safetensors does
    (by decreasing element size, then name)."""
    items = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in items:
        b = t.detach().contiguous().cpu().numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.detach().contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path, require_checksums=False):
    """Returns (dict name -> torch.Tensor, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    meta = header.pop("__metadata__", {})
    sums = json.loads(meta["ferry.crc32c"]) if "ferry.crc32c" in meta else None
    if require_checksums and sums is None:
        raise ValueError(f"{path}: no ferry.crc32c in __metadata__")
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if sums is not None and int(sums[name], 16) != crc32c(raw):
            raise ValueError(f"{path}: tensor {name}: checksum mismatch")
        dt = DTYPES[info["dtype"]]
        t = torch.frombuffer(bytearray(raw), dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"])
    return out, meta
