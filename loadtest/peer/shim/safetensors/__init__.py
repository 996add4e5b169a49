"""Stand-in for safetensors.safe_open (loadtest/peer/shim/README.md): eager torch tensors."""
import json
import struct

import torch

_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
}


class _File:
    def __init__(self, path):
        self._file = open(path, "rb")
        (size,) = struct.unpack("<Q", self._file.read(8))
        header = json.loads(self._file.read(size))
        header.pop("__metadata__", None)
        self._header = header
        self._base = 8 + size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()
        return False

    def keys(self):
        return list(self._header.keys())

    def get_tensor(self, name):
        entry = self._header[name]
        dtype = entry["dtype"]
        if dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {dtype} is not supported by the shim")
        begin, end = entry["data_offsets"]
        self._file.seek(self._base + begin)
        data = bytearray(self._file.read(end - begin))
        tensor = torch.frombuffer(data, dtype=_DTYPES[dtype]) if data else torch.empty(0, dtype=_DTYPES[dtype])
        return tensor.reshape(entry["shape"])


def safe_open(path, framework="pt", device="cpu"):
    if framework != "pt":
        raise ValueError("the shim reads torch tensors only")
    return _File(path)
