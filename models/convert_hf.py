"""Convert a pretrained softmax transformer in Hugging Face layout into a constant-state model (issue 29).

Sources: an HF Llama directory (`model_type: llama`) or an fla `transformer` directory (the same math
with fla names: model.embeddings, attn_norm, attn.{q,k,v,o}_proj, mlp_norm; head_dim = hidden_size /
num_heads). Both are read into one Llama view (config dict + tensors with Llama names).
Targets, for the layers listed (default all; the rest stay softmax):
  - t2r / abc -> `model_type: abcd_llama` (models/FORMAT.md, "abcd_llama"): every Llama tensor kept;
    GQA K/V rows repeated to num_attention_heads (num_key_value_heads := H), new t2r feature maps
    `self_attn.t2r.{weight ~ N(0, 1/hd), bias = 0}` or abc control projections
    `self_attn.control.{weight ~ N(0, 0.02), bias = 0}`, as the seeds' models/train.py initialises them.
  - gsa -> fla `model_type: gsa` (a hybrid with `attn` when some layers stay softmax): q/k/v/o kept
    (GSA applies its feature map to q and k and silu to v), new `f_proj ~ N(0, 0.02)` (fla's init)
    and `g_norm = 1`; num_slots, feature_map and gate_logit_normalizer from the caller (fla-hub
    defaults 64 / swish / 8); GQA kept (GSA supports it).
Every refusal is a ConversionError with one line naming the field. Pure functions of (config,
tensors); single-threaded.
"""

import json
from pathlib import Path

import torch

from abcd_ref.hf.checkpoint import read_tensors
from abcd_ref.hf.config import ARCHITECTURES, resolve

TARGETS = ("gsa", "t2r", "abc")
SOURCE_TYPES = ("llama", "transformer")
_LLAMA_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias",
               "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings")  # fmt: skip
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class ConversionError(ValueError):
    """A source or request the converter cannot handle; the message names the field."""


def _transformer_as_llama(cfg, tensors, where):
    """fla `transformer` config + tensors -> Llama config dict + tensors with Llama names."""
    for key in ("window_size", "qk_norm", "attn", "rope_scaling"):
        if cfg.get(key) not in (None, False):
            raise ConversionError(f"{where}: '{key}' {cfg[key]!r} is not supported (a plain transformer only)")
    if cfg.get("hidden_act", "swish") != "swish":
        raise ConversionError(f"{where}: 'hidden_act' {cfg['hidden_act']!r} is not supported (only 'swish')")
    d, heads = cfg.get("hidden_size", 2048), cfg.get("num_heads", 32)
    if d % heads:
        raise ConversionError(f"{where}: 'hidden_size' {d} is not divisible by num_heads {heads}")
    from abcd_ref.hf.config import intermediate_size

    llama = {
        "model_type": "llama",
        "vocab_size": cfg.get("vocab_size", 32000),
        "hidden_size": d,
        "intermediate_size": intermediate_size(d, cfg.get("hidden_ratio", 4), cfg.get("intermediate_size")),
        "num_hidden_layers": cfg.get("num_hidden_layers", 24),
        "num_attention_heads": heads,
        "num_key_value_heads": cfg.get("num_kv_heads") or heads,
        "head_dim": d // heads,
        "rms_norm_eps": cfg.get("norm_eps", 1e-6),
        "rope_theta": cfg.get("rope_theta", 10000.0) or 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.get("tie_word_embeddings", False),
        "max_position_embeddings": cfg.get("max_position_embeddings", 2048),
        **{k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in cfg},
    }
    renamed = {}
    for name, t in tensors.items():
        new = name.replace("model.embeddings.", "model.embed_tokens.").replace(".attn_norm.", ".input_layernorm.")
        new = new.replace(".mlp_norm.", ".post_attention_layernorm.").replace(".attn.", ".self_attn.")
        renamed[new] = t
    if cfg.get("qkv_bias"):  # fla attn: q/k/v biases, none on o: give o a zero bias
        llama["attention_bias"] = True
        for i in range(llama["num_hidden_layers"]):
            renamed[f"model.layers.{i}.self_attn.o_proj.bias"] = torch.zeros(d)
    return llama, renamed


def read_source(model_dir):
    """(Llama config dict, {Llama tensor name: fp32 tensor}) of an HF llama or fla transformer directory."""
    model_dir = Path(model_dir)
    where = f"{model_dir / 'config.json'}"
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConversionError(f"{where}: cannot read: {e}") from None
    kind = cfg.get("model_type")
    if kind not in SOURCE_TYPES:
        raise ConversionError(f"{where}: 'model_type' {kind!r} is not a supported source architecture (supported: {', '.join(SOURCE_TYPES)})")
    try:
        tensors = {n: t.to(torch.float32) for n, t in read_tensors(model_dir).items()}
    except ValueError as e:
        raise ConversionError(str(e)) from None
    if kind == "transformer":
        cfg, tensors = _transformer_as_llama(cfg, tensors, where)
    else:
        cfg = {k: cfg[k] for k in _LLAMA_KEYS if k in cfg} | {"model_type": "llama"}
    try:
        c = resolve(cfg)
    except ValueError as e:
        raise ConversionError(str(e)) from None
    if c.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return cfg, tensors


def parse_layers(text, num_layers):
    """--layers "0,2" -> sorted unique indices (None or empty text: every layer)."""
    if text is None or text == "":
        return list(range(num_layers))
    try:
        layers = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise ConversionError(f"--layers: expected comma-separated layer indices, got {text!r}") from None
    for i in layers:
        if not 0 <= i < num_layers:
            raise ConversionError(f"--layers: index {i} is out of range (num_hidden_layers {num_layers})")
    return layers


def _repeat_kv(tensors, c):
    """GQA -> MHA: every kv head's k/v rows (and bias) repeated for its query heads."""
    out = dict(tensors)
    for i in range(c.num_layers):
        for proj in ("k_proj", "v_proj"):
            for part in ("weight", "bias"):
                name = f"model.layers.{i}.self_attn.{proj}.{part}"
                if name in out:
                    t = out[name]
                    out[name] = t.view(c.num_kv_heads, c.head_dim, *t.shape[1:]).repeat_interleave(c.groups, 0).reshape(-1, *t.shape[1:])
    return out


def to_abcd_llama(cfg, tensors, target, layers, features=32, slots=32, seed=1234):
    """(abcd_llama config dict, tensors): `layers` become t2r (r = features) or abc (n = slots)."""
    c = resolve(cfg)
    if c.head_dim * c.num_heads != c.hidden_size:
        raise ConversionError(f"'head_dim' {c.head_dim} * num_attention_heads {c.num_heads} != hidden_size {c.hidden_size}: "
                              f"{target} layers need head_dim * heads == hidden_size")  # fmt: skip
    out_cfg = dict(cfg, model_type="abcd_llama", architectures=[ARCHITECTURES["abcd_llama"]], num_key_value_heads=c.num_heads)
    out_cfg["head_dim"] = c.head_dim
    spec = {"type": "t2r", "features": features, "eps": 1e-6} if target == "t2r" else {"type": "abc", "slots": slots}
    out_cfg["abcd_layers"] = [dict(spec) if i in layers else {"type": "softmax"} for i in range(c.num_layers)]
    out = _repeat_kv(tensors, c)
    g = torch.Generator().manual_seed(seed)
    for i in layers:
        p = f"model.layers.{i}.self_attn."
        if target == "t2r":  # abcd_ref HeadLinear / train.init_for_training
            out[p + "t2r.weight"] = torch.empty(c.num_heads, features, c.head_dim).normal_(0.0, c.head_dim**-0.5, generator=g)
            out[p + "t2r.bias"] = torch.zeros(c.num_heads, features)
        else:  # nn.Linear control: train.init_for_training's N(0, 0.02), zero bias
            out[p + "control.weight"] = torch.empty(c.num_heads * slots, c.hidden_size).normal_(0.0, 0.02, generator=g)
            out[p + "control.bias"] = torch.zeros(c.num_heads * slots)
    resolve(out_cfg)
    return out_cfg, out


def to_gsa(cfg, tensors, layers, num_slots=64, feature_map="swish", gate_logit_normalizer=8, seed=1234):
    """(fla gsa config dict, tensors): `layers` become GSA, the others fla softmax `attn` layers."""
    c = resolve(cfg)
    for key, bad in (("attention_bias", c.attention_bias), ("mlp_bias", c.mlp_bias), ("rope_scaling", c.rope_scaling is not None)):
        if bad:
            raise ConversionError(f"'{key}' is set: fla gsa/attn layers have no such option, so gsa conversion cannot keep it")
    value_dim = c.num_heads * c.head_dim
    if value_dim != c.hidden_size:
        raise ConversionError(f"value_dim (num_attention_heads {c.num_heads} * head_dim {c.head_dim} = {value_dim}) must equal hidden_size {c.hidden_size} for gsa")
    kept = [i for i in range(c.num_layers) if i not in layers]
    out_cfg = {
        "model_type": "gsa",
        "architectures": [ARCHITECTURES["gsa"]],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers,
        "hidden_ratio": 4,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "swish",
        "norm_eps": c.norm_eps,
        "num_heads": c.num_heads,
        "num_kv_heads": c.num_kv_heads,
        "num_slots": num_slots,
        "expand_k": 1,
        "expand_v": 1,
        "feature_map": feature_map,
        "gate_logit_normalizer": gate_logit_normalizer,
        "use_output_gate": False,
        "use_norm": True,
        "norm_first": False,
        "tie_word_embeddings": c.tie_word_embeddings,
        "max_position_embeddings": cfg.get("max_position_embeddings", 2048),
        "attn": None,
        **{k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in cfg},
    }
    if kept:
        out_cfg["attn"] = {"layers": kept, "num_heads": c.num_heads, "num_kv_heads": c.num_kv_heads, "qkv_bias": False,
                           "rope_theta": c.rope_theta, "window_size": None, "qk_norm": False}  # fmt: skip
    out = {}
    for name, t in tensors.items():
        new = name.replace("model.embed_tokens.", "model.embeddings.").replace(".input_layernorm.", ".attn_norm.")
        out[new.replace(".post_attention_layernorm.", ".mlp_norm.").replace(".self_attn.", ".attn.")] = t
    g = torch.Generator().manual_seed(seed)
    for i in layers:
        p = f"model.layers.{i}.attn."
        out[p + "f_proj.weight"] = torch.empty(c.num_kv_heads * num_slots, c.hidden_size).normal_(0.0, 0.02, generator=g)
        out[p + "g_norm.weight"] = torch.ones(value_dim)
        if feature_map == "t2r":
            out[p + "feature_map.layer.weight"] = torch.empty(c.head_dim, c.head_dim).normal_(0.0, c.head_dim**-0.5, generator=g)
    resolve(out_cfg)
    return out_cfg, out


def convert(cfg, tensors, target, layers, **options):
    """Dispatch on target (TARGETS). options: features, slots (abcd_llama); num_slots, feature_map,
    gate_logit_normalizer (gsa); seed."""
    if target not in TARGETS:
        raise ConversionError(f"--to: {target!r} is not one of {list(TARGETS)}")
    seed = options.get("seed", 1234)
    if target == "gsa":
        gsa = {k: options[k] for k in ("num_slots", "feature_map", "gate_logit_normalizer") if options.get(k) is not None}
        return to_gsa(cfg, tensors, layers, seed=seed, **gsa)
    sizes = {k: options[k] for k in ("features", "slots") if options.get(k) is not None}
    for key, value in sizes.items():
        if value < 1:
            raise ConversionError(f"--{key}: must be a positive integer, got {value}")
    return to_abcd_llama(cfg, tensors, target, layers, seed=seed, **sizes)


def attention_parameter(name):
    """--attention-only: the attention parameters (projections, feature maps, control, gates)."""
    return ".self_attn." in name or ".attn." in name


def model_state(model, tensors):
    """A state_dict for `model` from canonical tensors (a tied lm_head shares the embedding)."""
    state = dict(tensors)
    if "lm_head.weight" not in state:
        embed = "model.embed_tokens.weight" if "model.embed_tokens.weight" in state else "model.embeddings.weight"
        state["lm_head.weight"] = state[embed]
    return state


def set_training_chunks(model, gsa_chunk=16, abc_chunk=32):
    """Chunked training forms for the parallel pass (GSA: gsa_chunked; abc: abc_causal_chunked)."""
    from abcd_ref.abc_attention import ABCAttention
    from abcd_ref.hf.gsa import GatedSlotAttention
    from abcd_ref.hf.hybrid import AbcdMixer

    for module in model.modules():
        if isinstance(module, GatedSlotAttention):
            module.chunk = gsa_chunk
        elif isinstance(module, AbcdMixer) and isinstance(module.inner, ABCAttention):
            module.inner.chunk = abc_chunk
    return model


def source_dtype(model_dir):
    """The torch_dtype a directory's config.json declares (None if absent)."""
    return json.loads((Path(model_dir) / "config.json").read_text()).get("torch_dtype")
