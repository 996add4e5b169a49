# Stub safe_open (get_tensor / keys / metadata) for F32/F16/BF16 files: Debian has no safetensors.
import json, struct
import numpy as np
import torch

_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.int16}


class safe_open:
    def __init__(self, path, framework="pt", device="cpu"):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            self._header = json.loads(f.read(n))
            self._data = f.read()
        self._meta = self._header.pop("__metadata__", None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._header)

    def metadata(self):
        return self._meta

    def get_tensor(self, name):
        info = self._header[name]
        a, b = info["data_offsets"]
        arr = np.frombuffer(self._data[a:b], dtype=_NP[info["dtype"]]).reshape(info["shape"]).copy()
        t = torch.from_numpy(arr)
        return t.view(torch.bfloat16) if info["dtype"] == "BF16" else t
