"""PyTorch reference of the Hugging Face models abcd serves (fla gsa / gla / retnet / hgrn2, HF llama)
and a writer of random checkpoints in their exact HF layout (models/FORMAT.md, "Hugging Face
checkpoints"). Written from the decode specification, independently of the C++ engine."""

from .checkpoint import LEGACY_FEATURES, DEFAULT_LEGACY, build_model, load_checkpoint, tensor_shapes, write_checkpoint
from .config import MODEL_TYPES, preset_config, resolve, state_bytes
from .skeleton import run_recurrent

__all__ = [
    "DEFAULT_LEGACY",
    "LEGACY_FEATURES",
    "MODEL_TYPES",
    "build_model",
    "load_checkpoint",
    "preset_config",
    "resolve",
    "run_recurrent",
    "state_bytes",
    "tensor_shapes",
    "write_checkpoint",
]
