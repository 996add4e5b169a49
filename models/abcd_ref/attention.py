"""The self attention factory: an AttentionSpec (config.py) -> its module.

The families are side by side, each in its own file: attention_base.py (what they share),
softmax_attention.py (softmax, window), abc_attention.py (abc and its controls),
linear_attention.py (rfa, t2r, elu), gmat.py (GMAT encoder), txl_attention.py (Transformer-XL);
cross attention is in cross_attention.py.
"""

from .abc_attention import ABCAttention
from .gmat import GmatAttention
from .linear_attention import ELUAttention, RFAAttention, T2RAttention
from .softmax_attention import SoftmaxAttention, WindowAttention


def make_self_attention(spec, d_model, n_heads, causal, shared_control=None, layer_id=0, linformer=None):
    """Build the self attention module of an AttentionSpec (layer_id: abc `random` slot hash)."""
    if spec.type == "softmax":
        return SoftmaxAttention(d_model, n_heads, causal)
    if spec.type == "window":
        return WindowAttention(d_model, n_heads, spec.window, spec.dilation)
    if spec.type == "abc":
        shared = shared_control if spec.shared_control else None
        return ABCAttention(d_model, n_heads, spec.slots, causal, shared, spec.control, spec.seed, spec.reduce, layer_id, linformer, spec.block)
    if spec.type == "rfa":
        return RFAAttention(d_model, n_heads, spec.features, spec.kernel, spec.gate, spec.eps, causal)
    if spec.type == "t2r":
        return T2RAttention(d_model, n_heads, spec.features, spec.eps, causal)
    if spec.type == "elu":
        return ELUAttention(d_model, n_heads, spec.eps, causal)
    if spec.type == "gmat":
        return GmatAttention(d_model, n_heads, spec.chunk)
    raise ValueError(f"unknown attention type {spec.type!r}")


# ------------------------------------------------------------------------------------- cross
