"""Minimal safetensors reader/writer (the `safetensors` package is not available here).

Layout: 8-byte little-endian header length N, N bytes of JSON header (padded with spaces to a
multiple of 8), then the raw little-endian tensor data. Header entries are
{"dtype", "shape", "data_offsets": [begin, end]} relative to the data section; tensors are
written sorted by name, contiguous, without gaps. `save_file_streamed` writes the same layout from
per-tensor producers (one tensor in memory at a time). Conversions to BF16/F16 are torch's, which round
to nearest even.
"""

import json
import struct
import sys

import numpy as np
import torch

_DTYPE_TO_NAME = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int32: "I32",
    torch.int64: "I64",
}
_NAME_TO_DTYPE = {name: dtype for dtype, name in _DTYPE_TO_NAME.items()}
# numpy has no bfloat16: BF16 data travels through numpy as int16 and is reinterpreted.
_NUMPY_CARRIER = {"F32": np.float32, "BF16": np.int16, "F16": np.float16, "I32": np.int32, "I64": np.int64}

if sys.byteorder != "little":
    raise ImportError("safetensors_io assumes a little-endian host")


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def _header_bytes(header, metadata):
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return header_bytes + b" " * (-len(header_bytes) % 8)


def save_file_streamed(entries, path, metadata=None):
    """Write tensors produced one at a time: `entries` maps name -> (dtype, shape, producer), where
    producer() returns a tensor of that shape (converted to dtype here). Same layout as save_file."""
    header = {}
    offset = 0
    for name in sorted(entries):
        dtype, shape, _ = entries[name]
        if dtype not in _DTYPE_TO_NAME:
            raise TypeError(f"tensor {name!r}: unsupported dtype {dtype}")
        size = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        header[name] = {"dtype": _DTYPE_TO_NAME[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header_bytes = _header_bytes(header, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for name in sorted(entries):
            dtype, shape, producer = entries[name]
            tensor = producer().to(dtype)
            if tuple(tensor.shape) != tuple(shape):
                raise ValueError(f"tensor {name!r}: producer gave shape {list(tensor.shape)}, expected {list(shape)}")
            data = _tensor_bytes(tensor)
            begin, end = header[name]["data_offsets"]
            if len(data) != end - begin:
                raise ValueError(f"tensor {name!r}: {len(data)} bytes, expected {end - begin}")
            f.write(data)


def save_file(tensors, path, metadata=None):
    """Write a dict name -> tensor (F32/BF16/F16/I32/I64) to `path`.

    `metadata` is an optional dict of str -> str stored under "__metadata__".
    """
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in _DTYPE_TO_NAME:
            raise TypeError(f"tensor {name!r}: unsupported dtype {tensor.dtype}")
        data = _tensor_bytes(tensor)
        header[name] = {
            "dtype": _DTYPE_TO_NAME[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    header_bytes = _header_bytes(header, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for data in chunks:
            f.write(data)


def load_file(path, with_metadata=False):
    """Read a safetensors file into a dict name -> tensor (and the metadata dict if asked)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} exceeds file size")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        dtype_name = entry["dtype"]
        if dtype_name not in _NAME_TO_DTYPE:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype_name}")
        begin, end = entry["data_offsets"]
        shape = entry["shape"]
        carrier = _NUMPY_CARRIER[dtype_name]
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * np.dtype(carrier).itemsize:
            raise ValueError(f"{path}: tensor {name!r} has inconsistent data_offsets {begin, end}")
        array = np.frombuffer(data[begin:end], dtype=carrier).reshape(shape).copy()
        tensor = torch.from_numpy(array)
        if dtype_name == "BF16":
            tensor = tensor.view(torch.bfloat16)
        tensors[name] = tensor
    return (tensors, metadata) if with_metadata else tensors
