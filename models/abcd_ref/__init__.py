"""PyTorch reference implementation of the abcd model format (models/FORMAT.md)."""

from .config import AttentionSpec, ConfigError, LayerSpec, ModelConfig
from .export import export, load
from .model import DecoderLM, EncoderDecoder, build_model

__all__ = ["AttentionSpec", "ConfigError", "LayerSpec", "ModelConfig", "export", "load", "DecoderLM", "EncoderDecoder", "build_model"]
