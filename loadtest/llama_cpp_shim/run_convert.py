# Runs llama.cpp's convert_hf_to_gguf.py on Debian's torch 1.13 (no float8 dtypes): the float8
# names only fill a lookup table for safetensors dtypes our checkpoints never use.
import runpy, sys, torch
for name in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, name):
        setattr(torch, name, object())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
