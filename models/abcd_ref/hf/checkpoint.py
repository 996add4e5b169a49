"""HF-layout checkpoints: the tensor list of each model, a writer of random checkpoints (streamed per
tensor; f32/bf16/f16; single file or shards + index; the legacy fla layouts; tied heads; tokenizer
files) and a reader that loads any of those layouts back into the reference model (fp32).

Random weights are a function of (seed, canonical tensor name) only, so a legacy, sharded or bf16
file written with the same seed holds the same weights (up to rounding) as the plain one.
Single-threaded; the writer holds at most one tensor (fp32 + converted copy) in memory.
"""

import json
import shutil
import zlib
from pathlib import Path

import torch

from ..config import ConfigError
from ..safetensors_io import load_file, save_file_streamed
from .config import FLA_TYPES, GLA_GATE_LOW_RANK_DIM, LLAMA_TYPES, resolve
from .gated_deltanet import GatedDeltaNet
from .gated_linear import GatedLinearAttention, HGRN2Attention, MultiScaleRetention
from .gsa import GatedSlotAttention
from .hybrid import AbcdLlamaForCausalLM, FlaAttention
from .llama import LlamaForCausalLM
from .skeleton import FlaForCausalLM

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TORCH_DTYPE_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
# Legacy fla layouts (models/FORMAT.md, "Hugging Face checkpoints"): fused gate_proj [2I, d]; GSA
# attn.norm / mlp.norm (norm_first); GLA/RetNet attn.g_norm (fuse_norm false); model.embed_tokens.
LEGACY_FEATURES = ("fused_mlp", "norm_first", "g_norm", "embed_tokens")
DEFAULT_LEGACY = {"gsa": ("fused_mlp", "norm_first"), "gla": ("fused_mlp", "g_norm"), "retnet": ("fused_mlp", "g_norm")}
DEFAULT_LEGACY["hgrn2"] = ("fused_mlp",)
_MIXERS = {"gsa": GatedSlotAttention, "gla": GatedLinearAttention, "retnet": MultiScaleRetention, "hgrn2": HGRN2Attention,
           "gated_deltanet": GatedDeltaNet}  # fmt: skip
GATE_STD = 7.0  # std of the gate logits (GSA f, HGRN2 f, GLA gk): |logit| reaches ~20 on a few dozen tokens
GLA_GATE_BIAS = 6.0  # GLA gk_proj.1.bias ~ U(-6, 6)
INDEX_NAME = "model.safetensors.index.json"


def build_model(config):
    """A reference model (fp32, weights uninitialised) for an HF config dict."""
    c = resolve(config)
    if c.model_type in LLAMA_TYPES:
        return LlamaForCausalLM(c)
    if c.model_type == "abcd_llama":
        return AbcdLlamaForCausalLM(c)
    softmax_layers = c.attn.layers if c.attn is not None else ()
    return FlaForCausalLM(c, lambda cfg, i: FlaAttention(c.attn) if i in softmax_layers else _MIXERS[c.model_type](cfg, i))


def _llama_attn_shapes(c, prefix, heads, kv_heads, head_dim, qkv_bias, o_bias):
    """q/k/v/o projections of a softmax layer (biases of q/k/v if qkv_bias, of o if o_bias)."""
    d = c.hidden_size
    shapes = []
    for name, rows, cols, bias in (("q_proj", heads * head_dim, d, qkv_bias), ("k_proj", kv_heads * head_dim, d, qkv_bias),
                                   ("v_proj", kv_heads * head_dim, d, qkv_bias), ("o_proj", d, heads * head_dim, o_bias)):  # fmt: skip
        shapes.append((f"{prefix}{name}.weight", [rows, cols]))
        if bias:
            shapes.append((f"{prefix}{name}.bias", [rows]))
    return shapes


def _abcd_extra_shapes(c, spec):
    """Tensors an abcd_llama layer adds to the Llama projections (relative to `self_attn.`)."""
    if spec.type == "t2r":
        return [("t2r.weight", [c.num_heads, spec.features, c.head_dim]), ("t2r.bias", [c.num_heads, spec.features])]
    if spec.type == "abc":
        return [("control.weight", [c.num_heads * spec.slots, c.hidden_size]), ("control.bias", [c.num_heads * spec.slots])]
    return []


def _conv_shapes(c, specs):
    """`<name>_conv1d.weight [C, 1, conv_size]` (and `.bias [C]` with conv_bias) per (name, C), if use_short_conv."""
    if not c.use_short_conv:
        return []
    shapes = []
    for name, channels in specs:
        shapes.append((f"{name}_conv1d.weight", [channels, 1, c.conv_size]))
        if c.conv_bias:
            shapes.append((f"{name}_conv1d.bias", [channels]))
    return shapes


def _fla_attn_shapes(c):
    d, kv = c.hidden_size, c.num_kv_heads
    if c.model_type == "hgrn2":
        convs = _conv_shapes(c, [("q", c.key_dim), ("f", c.key_dim), ("i", c.value_dim)])
        return [("q_proj.weight", [c.key_dim, d]), ("f_proj.weight", [c.key_dim, d]), ("i_proj.weight", [c.value_dim, d])] + convs + [
                ("g_norm.weight", [c.value_dim]), ("o_proj.weight", [d, c.value_dim])]  # fmt: skip
    if c.model_type == "gated_deltanet":
        hv = c.num_v_heads
        shapes = [("q_proj.weight", [c.key_dim, d]), ("k_proj.weight", [c.key_dim, d]), ("v_proj.weight", [c.value_dim, d]),
                  ("a_proj.weight", [hv, d]), ("b_proj.weight", [hv, d]), ("A_log", [hv]), ("dt_bias", [hv])]  # fmt: skip
        shapes += _conv_shapes(c, [("q", c.key_dim), ("k", c.key_dim), ("v", c.value_dim)])
        if c.use_gate:
            shapes.append(("g_proj.weight", [c.value_dim, d]))
        return shapes + [("o_norm.weight", [c.head_v_dim]), ("o_proj.weight", [d, c.value_dim])]
    shapes = [
        ("q_proj.weight", [c.key_dim, d]),
        ("k_proj.weight", [kv * c.head_k_dim, d]),
        ("v_proj.weight", [kv * c.head_v_dim, d]),
    ]
    shapes += _conv_shapes(c, [("q", c.key_dim), ("k", kv * c.head_k_dim), ("v", kv * c.head_v_dim)])
    if c.model_type == "gsa":
        shapes.append(("f_proj.weight", [kv * c.num_slots, d]))
        if c.feature_map == "t2r":
            shapes.append(("feature_map.layer.weight", [c.head_k_dim, c.head_k_dim]))
        return shapes + [("g_norm.weight", [c.value_dim]), ("o_proj.weight", [d, c.value_dim])]
    if c.use_output_gate:
        shapes.append(("g_proj.weight", [c.value_dim, d]))
    if c.model_type == "gla":
        r = GLA_GATE_LOW_RANK_DIM
        shapes += [("gk_proj.0.weight", [r, d]), ("gk_proj.1.weight", [kv * c.head_k_dim, r]), ("gk_proj.1.bias", [kv * c.head_k_dim])]
    norm = "g_norm_swish_gate.weight" if c.use_output_gate else "g_norm.weight"
    return shapes + [(norm, [c.head_v_dim]), ("o_proj.weight", [d, c.value_dim])]


def tensor_shapes(config):
    """[(name, shape)] of the current HF layout in model order (lm_head omitted when tied)."""
    c = resolve(config)
    d, inter, bias = c.hidden_size, c.intermediate_size, getattr(c, "mlp_bias", False)
    mlp = [("gate_proj", [inter, d]), ("up_proj", [inter, d]), ("down_proj", [d, inter])]
    mlp = [(f"mlp.{n}.{p}", shape if p == "weight" else shape[:1]) for n, shape in mlp for p in ("weight", "bias")[: 1 + bias]]
    shapes = []
    if c.model_type in LLAMA_TYPES + ("abcd_llama",):
        attn = _llama_attn_shapes(c, "self_attn.", c.num_heads, c.num_kv_heads, c.head_dim, c.attention_bias, c.o_bias)
        if c.qk_norm:  # Qwen3: per-head RMSNorm weights of q and k
            attn += [("self_attn.q_norm.weight", [c.head_dim]), ("self_attn.k_norm.weight", [c.head_dim])]
        specs = c.abcd_layers if c.model_type == "abcd_llama" else [None] * c.num_layers
        blocks = [attn + [("self_attn." + n, s) for n, s in (_abcd_extra_shapes(c, spec) if spec else [])] for spec in specs]
        blocks = [[("input_layernorm.weight", [d])] + b + [("post_attention_layernorm.weight", [d])] + mlp for b in blocks]
        shapes.append(("model.embed_tokens.weight", [c.vocab_size, d]))
    else:
        a = c.attn
        softmax = _llama_attn_shapes(c, "attn.", a.num_heads, a.num_kv_heads, a.head_dim, a.attention_bias, False) if a else []
        recurrent = [("attn." + n, s) for n, s in _fla_attn_shapes(c)]
        blocks = [[("attn_norm.weight", [d])] + (softmax if a and i in a.layers else recurrent) + [("mlp_norm.weight", [d])] + mlp
                  for i in range(c.num_layers)]  # fmt: skip
        shapes.append(("model.embeddings.weight", [c.vocab_size, d]))
        if getattr(c, "use_lower_bound", False):
            shapes.append(("model.lower_bounds", [c.num_layers, d]))
    for i, block in enumerate(blocks):
        shapes += [(f"model.layers.{i}.{n}", s) for n, s in block]
    shapes.append(("model.norm.weight", [d]))
    if not c.tie_word_embeddings:
        shapes.append(("lm_head.weight", [c.vocab_size, d]))
    return shapes


def random_tensor(name, shape, seed):
    """The writer's deterministic init of one canonical tensor: a function of (seed, name, shape)."""
    generator = torch.Generator().manual_seed((seed * 0x9E3779B1 + zlib.crc32(name.encode())) % 2**63)
    out = torch.empty(shape)
    if name.endswith("norm.weight") or name.endswith("g_norm_swish_gate.weight"):
        return out.uniform_(0.5, 1.5, generator=generator)  # non-unit norm weights
    if name.endswith("lower_bounds"):
        return out.normal_(0.0, 1.0, generator=generator)
    if name.endswith("gk_proj.1.bias"):
        return out.uniform_(-GLA_GATE_BIAS, GLA_GATE_BIAS, generator=generator)
    if name.endswith(".bias"):
        return out.normal_(0.0, 0.1, generator=generator)
    std = shape[-1] ** -0.5  # fan-in (embeddings too: a tied head then gives O(1) logits as well)
    if name.endswith(("attn.f_proj.weight", "gk_proj.1.weight")):
        std *= GATE_STD if name.endswith("f_proj.weight") else GATE_STD - 2  # wide gate logits (saturation)
    return out.normal_(0.0, std, generator=generator)


def _legacy_entries(shapes, model_type, legacy):
    """[(file name, shape, [canonical sources])]: the file layout after applying the legacy features."""
    entries = []
    skip = set()
    for name, shape in shapes:
        if name in skip:
            continue
        file_name, sources = name, [name]
        if "fused_mlp" in legacy and name.endswith("mlp.gate_proj.weight"):
            up = name.replace("gate_proj", "up_proj")
            skip.add(up)
            sources, shape = [name, up], [2 * shape[0], shape[1]]
        if "norm_first" in legacy and model_type == "gsa":
            file_name = file_name.replace(".attn_norm.", ".attn.norm.").replace(".mlp_norm.", ".mlp.norm.")
        if "g_norm" in legacy:
            file_name = file_name.replace(".g_norm_swish_gate.", ".g_norm.")
        if "embed_tokens" in legacy and name == "model.embeddings.weight":
            file_name = "model.embed_tokens.weight"
        entries.append((file_name, shape, sources))
    return entries


def _split_shards(sizes, shards):
    """Shard index per tensor (in order), balanced by bytes, every shard non-empty."""
    if shards > len(sizes):
        raise ValueError(f"{shards} shards requested for {len(sizes)} tensors")
    total, cum, out = sum(sizes), 0, []
    for size in sizes:
        out.append(min(shards - 1, int((cum + size / 2) * shards / total)))
        cum += size
    if sorted(set(out)) != list(range(shards)):  # one huge tensor: fall back to equal tensor counts
        out = [i * shards // len(sizes) for i in range(len(sizes))]
    return out


def tokenizer_info(tokenizer_path):
    """(vocab size, {bos, eos, unk, pad} -> (id, piece) for ids >= 0) of a SentencePiece model."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    ids = {"bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id(), "pad": sp.pad_id()}
    return sp.get_piece_size(), {k: (i, sp.id_to_piece(i)) for k, i in ids.items() if i >= 0}


def _write_tokenizer_files(out_dir, tokenizer_path, specials):
    shutil.copyfile(tokenizer_path, out_dir / "tokenizer.model")
    tokens = {f"{k}_token": piece for k, (_, piece) in specials.items()}
    tokenizer_config = {
        "add_bos_token": True,
        "add_eos_token": False,
        **tokens,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(tokens, indent=2) + "\n")


def write_checkpoint(out_dir, config, seed=0, dtype="f32", shards=1, legacy=(), tokenizer=None, tensors=None):
    """Write a random checkpoint of `config` (an HF config dict, e.g. from preset_config) to out_dir.

    legacy: features of LEGACY_FEATURES (fla only); tokenizer: a SentencePiece model to copy (sets
    vocab_size and the special ids). tensors: {canonical name: tensor} to write instead of random
    weights (e.g. a trained model's state_dict; every name of tensor_shapes must be there).
    Returns the config dict written. Stale weight files are removed."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    config = dict(config)
    legacy = tuple(legacy)
    unknown = sorted(set(legacy) - set(LEGACY_FEATURES))
    if unknown:
        raise ValueError(f"unknown legacy features {unknown} (known: {list(LEGACY_FEATURES)})")
    if legacy and config.get("model_type") not in FLA_TYPES:
        raise ValueError("legacy layouts exist for the fla model types only")
    if "norm_first" in legacy and config["model_type"] == "gsa":
        config["norm_first"] = True
    if "g_norm" in legacy and config["model_type"] in ("gla", "retnet"):
        config["fuse_norm"] = False
    specials = {}
    if tokenizer is not None:
        config["vocab_size"], specials = tokenizer_info(tokenizer)
        for key in ("bos", "eos", "pad"):
            config[f"{key}_token_id"] = specials[key][0] if key in specials else None
    config["torch_dtype"] = TORCH_DTYPE_NAMES[dtype]
    config.setdefault("transformers_version", "4.45.2")
    entries = _legacy_entries(tensor_shapes(config), config["model_type"], legacy)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("model*.safetensors"), out_dir / INDEX_NAME]:
        stale.unlink(missing_ok=True)
    torch_dtype = DTYPES[dtype]
    element = torch.empty((), dtype=torch_dtype).element_size()
    sizes = [element * int(torch.Size(shape).numel()) for _, shape, _ in entries]
    assignment = _split_shards(sizes, shards) if shards > 1 else [0] * len(entries)
    files = ["model.safetensors"] if shards == 1 else [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]

    def make(name, shape):
        if tensors is None:
            return random_tensor(name, shape, seed)
        if name not in tensors:
            raise ValueError(f"tensor {name!r} of the config is missing from the given tensors")
        return tensors[name].detach().to(torch.float32)

    def producer(sources):
        return lambda: torch.cat([make(s, shape) for s, shape in sources])

    canonical = dict(tensor_shapes(config))
    for shard, file_name in enumerate(files):
        chosen = {n: (torch_dtype, shape, producer([(s, canonical[s]) for s in src]))
                  for (n, shape, src), a in zip(entries, assignment) if a == shard}  # fmt: skip
        save_file_streamed(chosen, out_dir / file_name, metadata={"format": "pt"})
    if shards > 1:
        weight_map = {name: files[a] for (name, _, _), a in sorted(zip(entries, assignment))}
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        (out_dir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"_from_model_config": True, "bos_token_id": config.get("bos_token_id"), "eos_token_id": config.get("eos_token_id")}
    generation["transformers_version"] = config["transformers_version"]
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    if tokenizer is not None:
        _write_tokenizer_files(out_dir, tokenizer, specials)
    return config


def read_tensors(model_dir):
    """All tensors of a directory: model.safetensors, or the shards named by model.safetensors.index.json."""
    model_dir = Path(model_dir)
    index_path = model_dir / INDEX_NAME
    if index_path.exists():
        weight_map = json.loads(index_path.read_text())["weight_map"]
        tensors = {}
        for file_name in sorted(set(weight_map.values())):
            shard = load_file(model_dir / file_name)
            for name in [n for n, f in weight_map.items() if f == file_name]:
                if name not in shard:
                    raise ValueError(f"{model_dir / file_name}: tensor {name!r} named by {INDEX_NAME} is missing")
                tensors[name] = shard[name]
        return tensors
    if (model_dir / "model.safetensors").exists():
        return load_file(model_dir / "model.safetensors")
    if (model_dir / "pytorch_model.bin").exists():
        raise ValueError(f"{model_dir}: only pytorch_model.bin (pickle) is present; convert it to safetensors")
    raise ValueError(f"{model_dir}: no model.safetensors or {INDEX_NAME}")


def to_current_layout(tensors, config):
    """Rename / split the legacy fla layouts into the current tensor names (detected from the names)."""
    c = resolve(config)
    tensors = dict(tensors)
    if c.model_type in LLAMA_TYPES + ("abcd_llama",):
        return tensors

    def rename(old, new):
        if old in tensors and new not in tensors:
            tensors[new] = tensors.pop(old)

    rename("model.embed_tokens.weight", "model.embeddings.weight")
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        if c.model_type == "gsa" and p + "attn.g_proj.weight" in tensors:
            raise ConfigError(f"{p}attn.g_proj.weight: GSA with an output gate (use_output_gate) is not supported")
        gate, up = p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"
        if gate in tensors and up not in tensors:
            fused = tensors.pop(gate)
            if fused.shape[0] != 2 * c.intermediate_size:
                raise ValueError(f"{gate}: fused gate_proj has {fused.shape[0]} rows, expected 2 * {c.intermediate_size}")
            tensors[gate], tensors[up] = fused[: c.intermediate_size], fused[c.intermediate_size :]
        if c.model_type == "gsa":
            rename(p + "attn.norm.weight", p + "attn_norm.weight")
            rename(p + "mlp.norm.weight", p + "mlp_norm.weight")
        if c.model_type in ("gla", "retnet") and c.use_output_gate:
            rename(p + "attn.g_norm.weight", p + "attn.g_norm_swish_gate.weight")
    return tensors


def load_checkpoint(model_dir):
    """(fp32 reference model, config dict) of an HF model directory in any layout the writer emits."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    model = build_model(config)
    tensors = to_current_layout(read_tensors(model_dir), config)
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)  # tied: the embedding is the head even if the file has both
    expected = dict(tensor_shapes(config))
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing tensors {missing}, unexpected tensors {unexpected}")
    for name, tensor in tensors.items():
        if list(tensor.shape) != list(expected[name]):
            raise ValueError(f"{model_dir}: tensor {name} has shape {list(tensor.shape)}, expected {expected[name]}")
    state = {name: t.to(torch.float32) for name, t in tensors.items()}
    if model.config.tie_word_embeddings:
        embedding = "model.embed_tokens.weight" if model.config.model_type in LLAMA_TYPES + ("abcd_llama",) else "model.embeddings.weight"
        state["lm_head.weight"] = state[embedding]
    model.load_state_dict(state)
    return model, config
