"""Runs llama.cpp's own convert_hf_to_gguf.py on an older Debian Python stack (see README.md).

Usage: convert.py LLAMA_CPP_DIR HF_DIR OUT.gguf [--outtype bf16|q8_0|f32]
The converter is run unchanged (runpy); where transformers, safetensors or mistral_common are
missing, loadtest/peer/shim stands in, and dtype names that Debian's torch 1.13 lacks
(float8_*, used only in a table of safetensors dtypes) are aliased to uint8.
"""
import importlib.util
import os
import runpy
import sys


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    llama_cpp, hf_dir, out = argv[:3]
    outtype = "bf16"
    if len(argv) > 3:
        if len(argv) != 5 or argv[3] != "--outtype":
            sys.exit(__doc__)
        outtype = argv[4]
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
    missing = [m for m in ("transformers", "safetensors", "mistral_common") if importlib.util.find_spec(m) is None]
    if missing:
        sys.path.insert(0, shim)
        for module in [m for m in list(sys.modules) if m.split(".")[0] in missing]:
            del sys.modules[module]
    import torch

    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.uint8)
    script = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    sys.argv = [script, hf_dir, "--outtype", outtype, "--no-lazy", "--outfile", out]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
