"""Hugging Face config.json of the fla models (gsa, gla, retnet, hgrn2, gated_deltanet; with or without
short convolutions: use_short_conv, conv_size, and the layer argument conv_bias), of HF Llama and the models built
like it (mistral: sliding_window; qwen2: q/k/v biases; qwen3: per-head q_norm / k_norm, explicit
head_dim), and of abcd_llama.

fla models may be hybrids: `attn` {"layers": [i, ...], "num_heads", "num_kv_heads", "qkv_bias",
"rope_theta", "window_size": null, "qk_norm": false} makes the listed layers fla softmax attention
(`c.attn`). `abcd_llama` is HF Llama with a per-layer `abcd_layers` list ({"type": "softmax"} |
{"type": "t2r", "features": r, "eps"} | {"type": "abc", "slots": n}; `c.abcd_layers`), see
models/FORMAT.md ("abcd_llama").

`resolve(config_dict)` applies the config classes' defaults, derives the sizes the modules need and
refuses what the reference does not implement (ConfigError naming the key). `state_bytes(config_dict)`
is the fp32 recurrent state per sequence (Llama: KV cache bytes per token). `preset_config(type,
preset)` builds the config.json dicts the checkpoint writer emits. Pure functions, no torch.
"""

import math
from types import SimpleNamespace

from ..config import ConfigError

FLA_TYPES = ("gsa", "gla", "retnet", "hgrn2", "gated_deltanet")
# Llama and the model types built like it (same tensor names; models/FORMAT.md).
LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MODEL_TYPES = ("llama",) + FLA_TYPES + ("abcd_llama", "mistral", "qwen2", "qwen3")
ABCD_LAYER_TYPES = ("softmax", "t2r", "abc")
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "gsa": "GSAForCausalLM",
    "gla": "GLAForCausalLM",
    "retnet": "RetNetForCausalLM",
    "hgrn2": "HGRN2ForCausalLM",
    "gated_deltanet": "GatedDeltaNetForCausalLM",
    "abcd_llama": "AbcdLlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
GSA_FEATURE_MAPS = ("swish", "relu", "t2r")
# HF ACT2FN names the GLA/RetNet `feature_map` may name (applied to q and k).
ACT_FEATURE_MAPS = ("relu", "silu", "swish", "sigmoid", "tanh", "gelu")
ROPE_TYPES = ("default", "linear", "llama3")
GLA_GATE_LOGIT_NORMALIZER = 16  # fla layer defaults, not read from config.json
GLA_GATE_LOW_RANK_DIM = 16

# Keys every fla config class writes, with the class defaults (model-specific ones added below).
_FLA_COMMON = {
    "vocab_size": 32000,
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "hidden_ratio": 4,
    "intermediate_size": None,
    "hidden_act": "swish",
    "norm_eps": 1e-6,
    "elementwise_affine": True,
    "attn": None,
    "attn_mode": "chunk",
    "use_short_conv": False,
    "conv_size": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": None,
    "initializer_range": 0.02,
    "use_cache": True,
    "fuse_norm": True,
    "fuse_swiglu": True,
    "fuse_cross_entropy": True,
}
_FLA_DEFAULTS = {
    "gsa": {
        "num_heads": 4,
        "num_kv_heads": None,
        "num_slots": 64,
        "expand_k": 1,
        "expand_v": 1,
        "gate_logit_normalizer": 8,
        "feature_map": "swish",
        "use_output_gate": False,
        "use_norm": True,
        "clamp_min": None,
        "clamp_max": None,
        "norm_first": False,
    },
    "gla": {
        "num_heads": 4,
        "num_kv_heads": None,
        "expand_k": 0.5,
        "expand_v": 1,
        "feature_map": None,
        "use_output_gate": True,
        "clamp_min": None,
        "use_gk": True,
        "use_gv": False,
    },
    "retnet": {
        "num_heads": 8,
        "num_kv_heads": None,
        "expand_k": 1,
        "expand_v": 2,
        "hidden_ratio": 2,
        "feature_map": None,
        "use_output_gate": True,
    },
    "hgrn2": {"num_heads": None, "expand_ratio": 128, "use_lower_bound": True},
    "gated_deltanet": {
        "num_hidden_layers": 21,
        "head_dim": 256,
        "num_heads": 6,
        "num_v_heads": None,
        "expand_v": 2,
        "use_gate": True,
        "use_short_conv": True,
        "allow_neg_eigval": False,
    },
}
_LLAMA_DEFAULTS = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "head_dim": None,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-6,
    "use_cache": True,
    "pad_token_id": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pretraining_tp": 1,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
}

# The transformers config class defaults of the Llama-built types (MistralConfig, Qwen2Config, Qwen3Config).
_LLAMA_LIKE_DEFAULTS = {
    "mistral": {
        **{k: v for k, v in _LLAMA_DEFAULTS.items() if k not in ("pretraining_tp", "rope_scaling", "attention_bias", "mlp_bias")},
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "sliding_window": 4096,
    },
    "qwen2": {
        **{k: v for k, v in _LLAMA_DEFAULTS.items() if k not in ("pretraining_tp", "rope_scaling", "attention_bias", "mlp_bias", "head_dim")},
        "vocab_size": 151936,
        "intermediate_size": 22016,
        "num_key_value_heads": 32,
        "max_position_embeddings": 32768,
        "rope_scaling": None,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
    },
    "qwen3": {
        **{k: v for k, v in _LLAMA_DEFAULTS.items() if k not in ("pretraining_tp", "mlp_bias")},
        "vocab_size": 151936,
        "intermediate_size": 22016,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
    },
}

# Writer presets: `tiny` (fixtures and tests) and `1.3b` (the fla-hub 1.3B shapes; Llama of the same width).
PRESETS = {
    "tiny": {
        "llama": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128},
        **{t: {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
           for t in ("mistral", "qwen2")},  # fmt: skip
        "qwen3": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "head_dim": 16},
        "gsa": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4, "num_slots": 8},
        "gla": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4},
        "retnet": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4},
        "hgrn2": {"hidden_size": 64, "num_hidden_layers": 2, "expand_ratio": 16},
        "gated_deltanet": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2, "head_dim": 16},
        "abcd_llama": {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "abcd_layers": [{"type": "t2r", "features": 8, "eps": 1e-6}, {"type": "abc", "slots": 8}],
        },
    },
    "1.3b": {
        "llama": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 5632,
            "max_position_embeddings": 4096,
        },
        # The Llama-built types at the same width, depth, MLP and vocabulary as every 1.3b preset
        # (so a table compares their attention alone), and everything else as published (checked
        # against the config.json files): Mistral-7B-v0.1's attention (head_dim 128, 8 KV heads,
        # sliding_window 4096, rms_norm_eps 1e-5, theta 1e4, untied); Qwen2.5-1.5B's (head_dim 128,
        # 2 KV heads, q/k/v biases, theta 1e6, rms_norm_eps 1e-6, tied; at width 2048 that is
        # Qwen2.5-3B's 16 heads); Qwen3-1.7B's (width 2048 already: 16 heads of head_dim 128, 8 KV
        # heads, q/k norms, theta 1e6, tied; its 28 layers and MLP 6144 cut to the common 24 / 5632).
        "mistral": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 5632,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-5,
            "sliding_window": 4096,
        },
        "qwen2": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "intermediate_size": 5632,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
        },
        "qwen3": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 5632,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
        },
        "gsa": {"hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 4, "num_slots": 64},
        "gla": {"hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 4, "expand_k": 0.5},
        "retnet": {"hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 8, "expand_v": 2, "hidden_ratio": 2},
        "hgrn2": {"hidden_size": 2048, "num_hidden_layers": 24, "expand_ratio": 128},
        "gated_deltanet": {"hidden_size": 2048, "num_hidden_layers": 21, "num_heads": 6, "head_dim": 256},
        "abcd_llama": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "intermediate_size": 5632,
            "max_position_embeddings": 4096,
            "abcd_layers": [{"type": "abc", "slots": 64}] * 24,
        },
    },
}
PRESET_VOCAB = {"tiny": 96, "1.3b": 32000}
PRESET_DTYPE = {"tiny": "f32", "1.3b": "bf16"}


def default_config(model_type):
    """The full config dict of `model_type` with the config class defaults (every key explicit)."""
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"model_type must be one of {list(MODEL_TYPES)}, got {model_type!r}")
    if model_type in _LLAMA_LIKE_DEFAULTS:
        base = dict(_LLAMA_LIKE_DEFAULTS[model_type])
    elif model_type in ("llama", "abcd_llama"):
        base = dict(_LLAMA_DEFAULTS)
    else:
        base = dict(_FLA_COMMON)
        base.update(_FLA_DEFAULTS[model_type])
    return {"model_type": model_type, "architectures": [ARCHITECTURES[model_type]], **base}


def preset_config(model_type, preset="tiny", **overrides):
    """A writer config: defaults, then the preset's sizes, then `overrides` (every size key explicit)."""
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    config = default_config(model_type)
    config.update(PRESETS[preset].get(model_type, PRESETS[preset]["llama"]))
    config["vocab_size"] = PRESET_VOCAB[preset]
    config.update(overrides)
    if model_type in LLAMA_TYPES + ("abcd_llama",):
        if config.get("num_key_value_heads") is None:
            config["num_key_value_heads"] = config["num_attention_heads"]
        if config.get("head_dim") is None:
            config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    elif model_type == "gated_deltanet":
        if config.get("num_v_heads") is None:
            config["num_v_heads"] = config["num_heads"]
    elif model_type != "hgrn2" and config.get("num_kv_heads") is None:
        config["num_kv_heads"] = config["num_heads"]
    return config


def intermediate_size(hidden_size, hidden_ratio, explicit):
    """fla GatedMLP width: `explicit` if set, else 256 * ceil(floor(d * ratio * 2/3) / 256) (ratio null -> 4)."""
    if explicit is not None:
        return int(explicit)
    ratio = 4 if hidden_ratio is None else hidden_ratio
    return 256 * math.ceil(int(hidden_size * ratio * 2 / 3) / 256)


def _get(config, key, default):
    value = config.get(key, default)
    return default if value is None and default is not None else value


def _positive_int(where, key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def _divides(where, what, numerator, denominator):
    if numerator % denominator:
        raise ConfigError(f"{where}: {what} ({numerator}) must be divisible by {denominator}")
    return numerator // denominator


def resolve(config):
    """Validate an HF config dict and return a SimpleNamespace of the sizes the modules use."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"config.json: 'model_type' must be one of {list(MODEL_TYPES)}, got {model_type!r}")
    if model_type == "abcd_llama":
        return _resolve_abcd_llama(config)
    return _resolve_llama(config) if model_type in LLAMA_TYPES else _resolve_fla(config, model_type)


def _resolve_fla(config, model_type):
    where = f"config.json ({model_type})"
    merged = default_config(model_type)
    merged.update({k: v for k, v in config.items() if k != "exapnd_k" and k != "exapnd_v"})
    for key in ("expand_k", "expand_v"):  # GSA's constructor spells these "exapnd_*"; the saved key wins
        if key not in config and f"exapnd_{key[7:]}" in config:
            merged[key] = config[f"exapnd_{key[7:]}"]
    if merged.get("attnres_block_size") is not None:
        raise ConfigError(f"{where}: 'attnres_block_size' is not supported (attention-residual layers), got {merged['attnres_block_size']!r}")
    if merged["hidden_act"] != "swish":
        raise ConfigError(f"{where}: 'hidden_act' {merged['hidden_act']!r} is not supported (only 'swish')")
    if merged["elementwise_affine"] is False:
        raise ConfigError(f"{where}: 'elementwise_affine' false is not supported")
    d = _positive_int(where, "hidden_size", merged["hidden_size"])
    c = SimpleNamespace(
        model_type=model_type,
        vocab_size=_positive_int(where, "vocab_size", merged["vocab_size"]),
        hidden_size=d,
        num_layers=_positive_int(where, "num_hidden_layers", merged["num_hidden_layers"]),
        norm_eps=float(merged["norm_eps"]),
        intermediate_size=intermediate_size(d, merged["hidden_ratio"], merged["intermediate_size"]),
        tie_word_embeddings=bool(merged["tie_word_embeddings"]),
    )
    c.attn = _resolve_fla_attn(where, merged.get("attn"), d, c.num_layers)
    c.use_short_conv = bool(merged["use_short_conv"]) and model_type != "retnet"  # fla never gives RetNet one
    c.conv_size = _positive_int(where, "conv_size", merged["conv_size"]) if c.use_short_conv else None
    c.conv_bias = bool(merged.get("conv_bias", False))  # the layer's argument (fla models leave it false)
    if model_type == "gated_deltanet":
        c.num_heads = _positive_int(where, "num_heads", merged["num_heads"])
        v_heads = merged["num_v_heads"]
        c.num_v_heads = c.num_heads if v_heads is None else _positive_int(where, "num_v_heads", v_heads)
        _divides(where, "num_v_heads", c.num_v_heads, c.num_heads)
        c.num_kv_heads = c.num_heads
        c.head_k_dim = _positive_int(where, "head_dim", merged["head_dim"])
        head_v = c.head_k_dim * merged["expand_v"]
        if not math.isclose(head_v, int(head_v), rel_tol=1e-5) or int(head_v) < 1:
            raise ConfigError(f"{where}: 'expand_v' {merged['expand_v']!r} gives a non-integer value head width {head_v}")
        c.head_v_dim = int(head_v)
        c.key_dim, c.value_dim = c.num_heads * c.head_k_dim, c.num_v_heads * c.head_v_dim
        c.use_gate = bool(merged["use_gate"])
        c.allow_neg_eigval = bool(merged["allow_neg_eigval"])
        return c
    if model_type == "hgrn2":
        ratio, heads = merged["expand_ratio"], merged["num_heads"]
        if ratio is None and heads is None:
            raise ConfigError(f"{where}: one of 'expand_ratio' and 'num_heads' must be set")
        if ratio is None:
            ratio = _divides(where, "hidden_size", d, _positive_int(where, "num_heads", heads))
        c.num_heads = _divides(where, "hidden_size", d, _positive_int(where, "expand_ratio", ratio))
        if heads is not None and heads != c.num_heads:
            raise ConfigError(f"{where}: 'num_heads' {heads} disagrees with hidden_size / expand_ratio = {c.num_heads}")
        c.head_k_dim = c.head_v_dim = ratio
        c.key_dim = c.value_dim = d
        c.num_kv_heads = c.num_heads
        c.use_lower_bound = bool(merged["use_lower_bound"])
        return c
    c.num_heads = _positive_int(where, "num_heads", merged["num_heads"])
    kv = merged["num_kv_heads"]
    c.num_kv_heads = c.num_heads if kv is None else _positive_int(where, "num_kv_heads", kv)
    c.groups = _divides(where, "num_heads", c.num_heads, c.num_kv_heads)
    c.key_dim, c.value_dim = int(d * merged["expand_k"]), int(d * merged["expand_v"])
    c.head_k_dim = _divides(where, "key_dim (hidden_size * expand_k)", c.key_dim, c.num_heads)
    c.head_v_dim = _divides(where, "value_dim (hidden_size * expand_v)", c.value_dim, c.num_heads)
    if model_type == "gsa":
        if merged["feature_map"] not in GSA_FEATURE_MAPS:
            raise ConfigError(f"{where}: 'feature_map' must be one of {list(GSA_FEATURE_MAPS)}, got {merged['feature_map']!r}")
        if c.value_dim != d:
            raise ConfigError(f"{where}: value_dim (hidden_size * expand_v = {c.value_dim}) must equal hidden_size {d}")
        slots = merged["num_slots"]
        c.num_slots = c.head_k_dim if slots is None else _positive_int(where, "num_slots", slots)
        c.feature_map = merged["feature_map"]
        c.gate_logit_normalizer = float(merged["gate_logit_normalizer"])
        return c
    fm = merged["feature_map"]
    if fm is not None and fm not in ACT_FEATURE_MAPS:
        raise ConfigError(f"{where}: 'feature_map' must be null or one of {list(ACT_FEATURE_MAPS)}, got {fm!r}")
    c.feature_map = fm
    c.use_output_gate = bool(merged["use_output_gate"])
    if model_type == "gla":
        c.clamp_min = None if merged["clamp_min"] is None else float(merged["clamp_min"])
    else:
        if c.head_k_dim % 2 or c.head_k_dim > 256:
            raise ConfigError(f"{where}: RetNet head key dim {c.head_k_dim} must be even and <= 256")
    return c


def _resolve_fla_attn(where, attn, d, num_layers):
    """The `attn` key of an fla hybrid (None: no softmax layers) -> SimpleNamespace or None."""
    if attn is None:
        return None
    if not isinstance(attn, dict):
        raise ConfigError(f"{where}: 'attn' must be an object or null, got {attn!r}")
    layers = attn.get("layers")
    if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise ConfigError(f"{where}: 'attn.layers' must be a list of layer indices, got {layers!r}")
    for i in layers:
        if not 0 <= i < num_layers:
            raise ConfigError(f"{where}: 'attn.layers' index {i} is out of range (num_hidden_layers {num_layers})")
    if attn.get("window_size") is not None:
        raise ConfigError(f"{where}: 'attn.window_size' must be null (sliding-window hybrid layers are not supported), got {attn['window_size']!r}")
    if attn.get("qk_norm", False):
        raise ConfigError(f"{where}: 'attn.qk_norm' true is not supported")
    heads = _positive_int(where, "attn.num_heads", attn.get("num_heads"))
    kv = attn.get("num_kv_heads")
    kv = heads if kv is None else _positive_int(where, "attn.num_kv_heads", kv)
    head_dim = _divides(where, "hidden_size (attn)", d, heads)
    if head_dim % 2:
        raise ConfigError(f"{where}: attn head dim {head_dim} (hidden_size / attn.num_heads) must be even (RoPE)")
    theta = attn.get("rope_theta", 10000.0)
    return SimpleNamespace(
        layers=sorted(set(layers)),
        hidden_size=d,
        num_heads=heads,
        num_kv_heads=kv,
        groups=_divides(where, "attn.num_heads", heads, kv),
        head_dim=head_dim,
        attention_bias=bool(attn.get("qkv_bias", False)),
        rope_theta=float(10000.0 if theta is None else theta),
    )


def rope_settings(config):
    """(theta, scaling dict or None) of a Llama config: `rope_parameters` (transformers >= 5) first."""
    where = "config.json (llama)"
    params = config.get("rope_parameters")
    if params is not None:
        theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
        scaling = params
        key = "rope_parameters"
    else:
        theta = config.get("rope_theta", 10000.0)
        scaling = config.get("rope_scaling")
        key = "rope_scaling"
    if theta is None:
        theta = 10000.0
    if scaling is None:
        return float(theta), None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ConfigError(f"{where}: '{key}.rope_type' {kind!r} is not supported (only linear and llama3)")
    if kind == "default":
        return float(theta), None
    required = ("factor",) if kind == "linear" else ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    for name in required:
        if not isinstance(scaling.get(name), (int, float)) or isinstance(scaling.get(name), bool):
            raise ConfigError(f"{where}: '{key}.{name}' must be a number for rope_type {kind}, got {scaling.get(name)!r}")
    return float(theta), {"rope_type": kind, **{name: float(scaling[name]) for name in required}}


def _resolve_llama(config, where=None):
    model_type = config.get("model_type", "llama")
    if model_type not in LLAMA_TYPES:
        model_type = "llama"  # abcd_llama: Llama's keys
    where = where or f"config.json ({model_type})"
    merged = dict(_LLAMA_LIKE_DEFAULTS.get(model_type, _LLAMA_DEFAULTS))
    merged.update(config)
    if merged["hidden_act"] != "silu":
        raise ConfigError(f"{where}: 'hidden_act' {merged['hidden_act']!r} is not supported (only 'silu')")
    d = _positive_int(where, "hidden_size", merged["hidden_size"])
    heads = _positive_int(where, "num_attention_heads", merged["num_attention_heads"])
    kv = merged["num_key_value_heads"]
    kv = heads if kv is None else _positive_int(where, "num_key_value_heads", kv)
    head_dim = merged.get("head_dim")
    if head_dim is None and model_type == "qwen3":
        head_dim = 128  # Qwen3Config's default
    head_dim = _divides(where, "hidden_size", d, heads) if head_dim is None else _positive_int(where, "head_dim", head_dim)
    if head_dim % 2:
        raise ConfigError(f"{where}: 'head_dim' {head_dim} must be even (RoPE)")
    theta, scaling = rope_settings(config)
    num_layers = _positive_int(where, "num_hidden_layers", merged["num_hidden_layers"])
    windows = _layer_windows(where, merged, model_type, num_layers)
    # Qwen2: q/k/v biases always, o_proj none; Qwen3 / Llama / Mistral: attention_bias on all four.
    qkv_bias = True if model_type == "qwen2" else bool(merged.get("attention_bias", False))
    return SimpleNamespace(
        model_type=model_type,
        vocab_size=_positive_int(where, "vocab_size", merged["vocab_size"]),
        hidden_size=d,
        num_layers=num_layers,
        norm_eps=float(merged["rms_norm_eps"]),
        intermediate_size=_positive_int(where, "intermediate_size", merged["intermediate_size"]),
        tie_word_embeddings=bool(merged["tie_word_embeddings"]),
        num_heads=heads,
        num_kv_heads=kv,
        groups=_divides(where, "num_attention_heads", heads, kv),
        head_dim=head_dim,
        rope_theta=theta,
        rope_scaling=scaling,
        attention_bias=qkv_bias,
        o_bias=False if model_type == "qwen2" else qkv_bias,
        mlp_bias=bool(merged.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        layer_windows=windows,
    )


def _layer_windows(where, merged, model_type, num_layers):
    """Each layer's sliding window (None: full attention), as transformers derives it: Mistral's
    `sliding_window` on every layer; Qwen2/Qwen3 `sliding_window` only with `use_sliding_window`, on the
    layers `layer_types` names "sliding_attention", or without it on layers >= `max_window_layers`."""
    if model_type == "mistral":
        window = merged.get("sliding_window")
        return [None if window is None else _positive_int(where, "sliding_window", window)] * num_layers
    if model_type not in ("qwen2", "qwen3"):
        return [None] * num_layers
    window = merged.get("sliding_window") if merged.get("use_sliding_window") else None
    if window is not None:
        window = _positive_int(where, "sliding_window", window)
    types = merged.get("layer_types")
    if types is None:
        first = merged.get("max_window_layers", 28)
        return [window if i >= first else None for i in range(num_layers)]
    if not isinstance(types, list) or len(types) != num_layers:
        raise ConfigError(f"{where}: 'layer_types' must be a list of num_hidden_layers ({num_layers}) entries, got {types!r}")
    for i, kind in enumerate(types):
        if kind not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"{where}: 'layer_types[{i}]' must be full_attention or sliding_attention, got {kind!r}")
        if kind == "sliding_attention" and window is None:
            raise ConfigError(f"{where}: 'layer_types[{i}]' sliding_attention needs use_sliding_window true and a sliding_window")
    return [window if kind == "sliding_attention" else None for kind in types]


def _abcd_layer(where, i, spec):
    if not isinstance(spec, dict) or spec.get("type") not in ABCD_LAYER_TYPES:
        got = spec.get("type") if isinstance(spec, dict) else spec
        raise ConfigError(f"{where}: 'abcd_layers[{i}].type' must be one of {list(ABCD_LAYER_TYPES)}, got {got!r}")
    kind = spec["type"]
    known = {"softmax": {"type"}, "t2r": {"type", "features", "eps"}, "abc": {"type", "slots", "control"}}[kind]
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ConfigError(f"{where}: 'abcd_layers[{i}].{unknown[0]}' is not a field of a {kind} layer")
    out = SimpleNamespace(type=kind)
    if kind == "t2r":
        out.features = _positive_int(where, f"abcd_layers[{i}].features", spec.get("features"))
        eps = spec.get("eps", 1e-6)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ConfigError(f"{where}: 'abcd_layers[{i}].eps' must be a positive number, got {eps!r}")
        out.eps = float(eps)
    elif kind == "abc":
        out.slots = _positive_int(where, f"abcd_layers[{i}].slots", spec.get("slots"))
        if spec.get("control", "exp") != "exp":
            raise ConfigError(f"{where}: 'abcd_layers[{i}].control' must be \"exp\", got {spec['control']!r}")
    return out


def _resolve_abcd_llama(config):
    """HF Llama plus `abcd_layers`; t2r/abc layers need num_key_value_heads == num_attention_heads and
    head_dim * num_attention_heads == hidden_size."""
    where = "config.json (abcd_llama)"
    c = _resolve_llama(config, where)
    c.model_type = "abcd_llama"
    layers = config.get("abcd_layers")
    if not isinstance(layers, list) or len(layers) != c.num_layers:
        raise ConfigError(f"{where}: 'abcd_layers' must be a list of num_hidden_layers ({c.num_layers}) layer specs, got {layers!r}")
    c.abcd_layers = [_abcd_layer(where, i, spec) for i, spec in enumerate(layers)]
    if c.num_kv_heads != c.num_heads:
        raise ConfigError(f"{where}: 'num_key_value_heads' ({c.num_kv_heads}) must equal num_attention_heads ({c.num_heads})")
    if c.head_dim * c.num_heads != c.hidden_size:
        raise ConfigError(f"{where}: 'head_dim' ({c.head_dim}) * num_attention_heads ({c.num_heads}) must equal hidden_size ({c.hidden_size})")
    return c


def kv_bytes_per_token(config):
    """fp32 KV cache bytes per token of the softmax layers (llama: all; fla hybrids: `attn.layers`;
    abcd_llama: its softmax layers); 0 for a model without softmax layers."""
    c = resolve(config)
    if c.model_type in LLAMA_TYPES:  # windowed layers keep a fixed ring instead (state_bytes)
        return sum(w is None for w in c.layer_windows) * 2 * c.num_kv_heads * c.head_dim * 4
    if c.model_type == "abcd_llama":
        return sum(2 * c.num_heads * c.head_dim * 4 for spec in c.abcd_layers if spec.type == "softmax")
    if c.attn is None:
        return 0
    return len(c.attn.layers) * 2 * c.attn.num_kv_heads * c.attn.head_dim * 4


def conv_channels(c):
    """Channels of a resolved fla config's short convolutions (q, k, v; HGRN2 q, f, i), 0 without."""
    if not c.use_short_conv:
        return 0
    if c.model_type == "gated_deltanet":
        return 2 * c.key_dim + c.value_dim
    if c.model_type == "hgrn2":
        return 2 * c.key_dim + c.value_dim
    return c.key_dim + c.num_kv_heads * (c.head_k_dim + c.head_v_dim)


def conv_state_floats(c):
    """Floats a layer's short convolutions keep: the last conv_size - 1 inputs of every channel."""
    return (c.conv_size - 1) * conv_channels(c) if c.use_short_conv else 0


def state_bytes(config):
    """fp32 bytes of one sequence's recurrent state (fla types; RetNet's position counter not counted;
    hybrids: the recurrent layers only), or, for llama (mistral, qwen2, qwen3), KV cache bytes per
    token (2 * L * Hkv * head_dim * 4); with sliding windows (Mistral, Qwen) the windowed layers' fixed
    rings instead, 2 * Hkv * head_dim * w * 4 each. abcd_llama: t2r layers H r (hd + 1) (S and z), abc layers H n (2 hd + 1) (K~, V~
    and the log normaliser); its softmax layers are in kv_bytes_per_token. fla short convolutions add
    (conv_size - 1) * channels per layer; gated_deltanet keeps S [num_v_heads, head_dim, V] per layer."""
    c = resolve(config)
    if c.model_type in LLAMA_TYPES:
        if any(w is not None for w in c.layer_windows):  # rings of the last w keys and values
            return sum(2 * c.num_kv_heads * c.head_dim * w * 4 for w in c.layer_windows if w is not None)
        return kv_bytes_per_token(config)
    if c.model_type == "abcd_llama":
        per = {"softmax": lambda s: 0, "t2r": lambda s: s.features * (c.head_dim + 1), "abc": lambda s: s.slots * (2 * c.head_dim + 1)}
        return sum(c.num_heads * per[s.type](s) for s in c.abcd_layers) * 4
    if c.model_type == "gsa":  # key memory [H, K, M] + value memory [H, M, V]
        per_layer = (c.key_dim + c.value_dim) * c.num_slots
    elif c.model_type == "gated_deltanet":  # S [Hv, K, V]
        per_layer = c.num_v_heads * c.head_k_dim * c.head_v_dim
    else:  # gla / retnet / hgrn2: S [H, K, V]
        per_layer = c.num_heads * c.head_k_dim * c.head_v_dim
    per_layer += conv_state_floats(c)
    return (c.num_layers - (len(c.attn.layers) if c.attn else 0)) * per_layer * 4
