"""Write and read model directories (config.json, model.safetensors, tokenizer.model)."""

import shutil
from pathlib import Path

import torch

from .config import ModelConfig
from .model import build_model
from .safetensors_io import load_file, save_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def export(model, config, out_dir, dtype="float32", tokenizer_path=None):
    """Write `config` and the weights of `model` (as `dtype`) to out_dir; copy the tokenizer if given."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save(out_dir / "config.json")
    tensors = {name: t.detach().to(DTYPES[dtype]) for name, t in model.state_dict().items()}
    save_file(tensors, out_dir / "model.safetensors", metadata={"format": "pt"})
    if tokenizer_path is not None:
        shutil.copyfile(tokenizer_path, out_dir / "tokenizer.model")


def load(model_dir):
    """Read a model directory back into a float32 model (tensor names and shapes checked exactly)."""
    model_dir = Path(model_dir)
    config = ModelConfig.load(model_dir / "config.json")
    model = build_model(config)
    expected = model.state_dict()
    tensors = load_file(model_dir / "model.safetensors")
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing tensors {missing}, unexpected tensors {unexpected}")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise ValueError(f"{model_dir}: tensor {name} has shape {list(tensor.shape)}, expected {list(expected[name].shape)}")
    model.load_state_dict({name: t.to(torch.float32) for name, t in tensors.items()})
    return model
