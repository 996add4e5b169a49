"""Model configuration: the `config.json` of models/FORMAT.md (format version 1)."""

import json
from dataclasses import dataclass, field
from typing import List, Optional

FORMAT_VERSION = 1
ATTENTION_TYPES = ("softmax", "window", "abc", "rfa", "t2r", "elu", "txl", "gmat")
DEFAULT_EPS = {"rfa": 1e-2, "t2r": 1e-6, "elu": 1e-6}
# abc control functions (FORMAT.md, "abc control") and the reductions of `random` control.
ABC_CONTROLS = ("exp", "sigmoid", "relu", "random", "position", "block", "cluster")
# Controls with a learned projection `A.control` (the others compute their writes from the position
# or the keys; `position` reads the stack's `linformer` table).
ABC_LEARNED_CONTROLS = ("exp", "sigmoid", "relu")
# Controls only served in decoder self attention (the Compressive Transformer row of ABC, Peng et al. 2022 App. A.3, gives no
# encoder/cross form we serve).
# `position` (Linformer) has all three forms: decoder self (causal), encoder self (bidirectional) and
# cross, each with its own table (FORMAT.md).
ABC_DECODER_ONLY_CONTROLS = ("block",)
ABC_REDUCES = ("mean", "sum")
MAX_SEED = 2**63 - 1
# Longest ring a (dilated) window may keep: (window - 1) * dilation + 1 tokens (the engine's bound).
MAX_WINDOW_SPAN = 2**30
# Which attention types each position admits (FORMAT.md, "Attention specs").
ALLOWED = {
    "decoder self": set(ATTENTION_TYPES) - {"gmat"},  # txl: decoder self attention only
    "encoder self": {"softmax", "abc", "rfa", "t2r", "elu", "gmat"},
    "cross": {"softmax", "abc", "rfa", "t2r", "elu"},
}
# JSON fields of each type besides "type".
_FIELDS = {
    "softmax": (),
    "window": ("window", "dilation"),
    "abc": ("slots", "shared_control", "control", "seed", "reduce", "max_positions", "block"),
    "rfa": ("features", "kernel", "gate", "eps"),
    "t2r": ("features", "eps"),
    "elu": ("eps",),
    "txl": ("memory", "clamp_len"),
    "gmat": ("chunk",),
}
# Model-level positional encodings and block norms (FORMAT.md; "none" and "post": Transformer-XL).
POSITIONALS = ("sinusoidal", "none")
NORMS = ("pre", "post")
# GMAT (Gupta & Berant 2020): encoder outputs the decoder's cross attention reads.
GMAT_OUTPUTS = ("memory", "all")


class ConfigError(ValueError):
    """Raised for an invalid or unsupported config."""


def _require_int(where, name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: '{name}' must be an integer >= {minimum}, got {value!r}")


@dataclass
class AttentionSpec:
    """One attention block: its type and the type's parameters."""

    type: str
    slots: Optional[int] = None  # abc
    shared_control: bool = False  # abc
    window: Optional[int] = None  # window
    dilation: int = 1  # window: attend to t, t - dilation, ..., t - (window - 1) * dilation
    features: Optional[int] = None  # rfa (D), t2r (r)
    kernel: Optional[str] = None  # rfa: "gaussian" | "arccos"
    gate: bool = False  # rfa
    eps: Optional[float] = None  # rfa, t2r, elu
    control: str = "exp"  # abc: exp | sigmoid | relu | random
    seed: Optional[int] = None  # abc random: slot hash seed
    reduce: Optional[str] = None  # abc random: "mean" (default) | "sum"
    max_positions: Optional[int] = None  # abc position: N, columns of the stack's linformer table
    block: Optional[int] = None  # abc block: tokens per block (c)
    memory: Optional[int] = None  # txl: previous positions each query sees (M)
    clamp_len: Optional[int] = None  # txl: relative distances beyond C use p_C
    chunk: int = 0  # gmat: main tokens attend within chunks of this length (0 = all main tokens)

    def __post_init__(self):
        if self.eps is None and self.type in DEFAULT_EPS:
            self.eps = DEFAULT_EPS[self.type]
        if self.type == "abc" and self.control == "random" and self.reduce is None:
            self.reduce = "mean"

    @classmethod
    def from_dict(cls, d, where):
        if not isinstance(d, dict) or "type" not in d:
            raise ConfigError(f"{where}: attention spec must be an object with a 'type'")
        kind = d["type"]
        if kind not in _FIELDS:
            raise ConfigError(f"{where}: unknown attention type {kind!r} (expected one of {ATTENTION_TYPES})")
        unknown = set(d) - {"type", *_FIELDS[kind]}
        if unknown:
            raise ConfigError(f"{where}: fields {sorted(unknown)} are not valid for type {kind!r}")
        return cls(**d)

    def to_dict(self):
        """JSON form with every field of the type written explicitly (eps included)."""
        out = {"type": self.type}
        for name in _FIELDS[self.type]:
            # abc: `control` only when it is not the default exp (configs written before it existed
            # stay byte-identical); `seed` and `reduce` only for random control.
            if name == "control" and self.control == "exp":
                continue
            if name in ("seed", "reduce") and self.control != "random":
                continue
            if name == "max_positions" and self.control != "position":
                continue
            if name == "block" and self.control != "block":
                continue
            # window: `dilation` only when dilated (configs written before it existed stay byte-identical).
            if name == "dilation" and self.dilation == 1:
                continue
            out[name] = getattr(self, name)
        return out

    def validate(self, where, position):
        if self.type == "gmat" and position != "encoder self":
            raise ConfigError(f"{where}: type 'gmat' is only allowed in encoder_layers (there is no causal GMAT)")
        if self.type == "gmat":
            _require_int(where, "chunk", self.chunk, 0)
        if self.type not in ALLOWED[position]:
            raise ConfigError(f"{where}: type {self.type!r} is not allowed in {position} attention")
        if self.type == "window":
            _require_int(where, "window", self.window, 1)
            _require_int(where, "dilation", self.dilation, 1)
            if (self.window - 1) * self.dilation + 1 > MAX_WINDOW_SPAN:
                raise ConfigError(f"{where}: 'dilation' makes the ring (window - 1) * dilation + 1 longer than {MAX_WINDOW_SPAN}")
        elif self.type == "abc":
            _require_int(where, "slots", self.slots, 1)
            if not isinstance(self.shared_control, bool):
                raise ConfigError(f"{where}: 'shared_control' must be a bool")
            if self.shared_control and position == "cross":
                raise ConfigError(f"{where}: shared_control is only for self attention")
            self._validate_control(where)
            if self.control in ABC_DECODER_ONLY_CONTROLS and position != "decoder self":
                raise ConfigError(f"{where}: control {self.control!r} is only supported in decoder self attention")
        elif self.type in ("rfa", "t2r"):
            _require_int(where, "features", self.features, 1)
        elif self.type == "txl":
            _require_int(where, "memory", self.memory, 1)
            _require_int(where, "clamp_len", self.clamp_len, 1)
            if self.memory > MAX_WINDOW_SPAN - 1:
                raise ConfigError(f"{where}: 'memory' must be below {MAX_WINDOW_SPAN}")
        if self.type == "rfa":
            if self.kernel not in ("gaussian", "arccos"):
                raise ConfigError(f"{where}: 'kernel' must be 'gaussian' or 'arccos', got {self.kernel!r}")
            if not isinstance(self.gate, bool):
                raise ConfigError(f"{where}: 'gate' must be a bool")
            if self.gate and position == "encoder self":
                raise ConfigError(f"{where}: gated rfa is not allowed in the encoder")
            if self.gate and position == "cross":
                raise ConfigError(f"{where}: 'gate' is not allowed on cross attention (gates are causal)")
        if self.type in DEFAULT_EPS:
            if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
                raise ConfigError(f"{where}: 'eps' must be a positive number, got {self.eps!r}")


    def _validate_control(self, where):
        if self.control not in ABC_CONTROLS:
            raise ConfigError(f"{where}: 'control' must be one of {ABC_CONTROLS}, got {self.control!r}")
        for name, owner in (("seed", "random"), ("reduce", "random"), ("max_positions", "position"), ("block", "block")):
            if self.control != owner and getattr(self, name) is not None:
                raise ConfigError(f"{where}: '{name}' is only for control '{owner}'")
        if self.shared_control and self.control not in ABC_LEARNED_CONTROLS:
            raise ConfigError(f"{where}: shared_control needs a learned control (not {self.control!r})")
        if self.control == "position":
            _require_int(where, "max_positions", self.max_positions, 1)
        if self.control == "block":
            _require_int(where, "block", self.block, 1)
        if self.control != "random":
            return
        if self.seed is None:
            raise ConfigError(f"{where}: 'seed' is required for control 'random'")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"{where}: 'seed' must be an integer in [0, 2^63), got {self.seed!r}")
        if self.reduce not in ABC_REDUCES:
            raise ConfigError(f"{where}: 'reduce' must be one of {ABC_REDUCES}, got {self.reduce!r}")
        if self.shared_control:
            raise ConfigError(f"{where}: shared_control needs a learned control (not 'random')")


@dataclass
class LayerSpec:
    """One transformer layer: self attention and (encoder-decoder decoder layers) cross attention."""

    attention: AttentionSpec
    cross_attention: Optional[AttentionSpec] = None

    @classmethod
    def from_dict(cls, d, where):
        if not isinstance(d, dict) or "attention" not in d:
            raise ConfigError(f"{where}: layer must be an object with an 'attention' spec")
        unknown = set(d) - {"attention", "cross_attention"}
        if unknown:
            raise ConfigError(f"{where}: unknown layer fields {sorted(unknown)}")
        cross = d.get("cross_attention")
        return cls(
            attention=AttentionSpec.from_dict(d["attention"], f"{where}.attention"),
            cross_attention=None if cross is None else AttentionSpec.from_dict(cross, f"{where}.cross_attention"),
        )

    def to_dict(self):
        out = {"attention": self.attention.to_dict()}
        if self.cross_attention is not None:
            out["cross_attention"] = self.cross_attention.to_dict()
        return out


@dataclass
class GmatSpec:
    """Model-level GMAT settings (Gupta & Berant 2020): M learned memory tokens beside the source.

    output "memory": the encoder output is ln_f of the M memory rows (the decoder's cross attention
    reads M vectors whatever the source length); "all": ln_f of [source rows; memory rows].
    memory_only_layers (GMAT 2.1's N_m) must be 0: memory-only layers are not implemented.
    """

    memory: int
    output: str = "memory"
    memory_only_layers: int = 0

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise ConfigError("gmat must be an object")
        unknown = set(d) - {"memory", "output", "memory_only_layers"}
        if unknown:
            raise ConfigError(f"gmat: unknown fields {sorted(unknown)}")
        if "memory" not in d:
            raise ConfigError("gmat: 'memory' is required")
        return cls(**d)

    def validate(self):
        _require_int("gmat", "memory", self.memory, 1)
        if self.output not in GMAT_OUTPUTS:
            raise ConfigError(f"gmat: 'output' must be one of {GMAT_OUTPUTS}, got {self.output!r}")
        _require_int("gmat", "memory_only_layers", self.memory_only_layers, 0)
        if self.memory_only_layers != 0:
            raise ConfigError("gmat: 'memory_only_layers' must be 0 (memory-only layers are not implemented)")

    def to_dict(self):
        return {"memory": self.memory, "output": self.output, "memory_only_layers": self.memory_only_layers}


@dataclass
class ModelConfig:
    """Architecture, sizes, per-layer attention specs and special token ids."""

    vocab_size: int
    d_model: int
    n_heads: int
    d_ff: int
    decoder_layers: List[LayerSpec]
    encoder_layers: List[LayerSpec] = field(default_factory=list)
    architecture: str = "decoder"
    activation: str = "gelu"
    layer_norm_eps: float = 1e-5
    scale_embeddings: bool = True
    tie_embeddings: bool = True
    positional: str = "sinusoidal"
    norm: str = "pre"  # "post": Transformer-XL's post-LN blocks (decoder-only models)
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 0
    unk_id: int = 3
    format_version: int = FORMAT_VERSION
    gmat: Optional[GmatSpec] = None  # encoder-decoder with a GMAT encoder only

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def is_encoder_decoder(self):
        return self.architecture == "encoder-decoder"

    def validate(self):
        """Raise ConfigError with a clear message if the config breaks FORMAT.md."""
        if self.format_version != FORMAT_VERSION:
            raise ConfigError(f"format_version {self.format_version!r} is not supported (expected {FORMAT_VERSION})")
        if self.architecture not in ("decoder", "encoder-decoder"):
            raise ConfigError(f"architecture must be 'decoder' or 'encoder-decoder', got {self.architecture!r}")
        for name in ("vocab_size", "d_model", "n_heads", "d_ff"):
            _require_int("config", name, getattr(self, name), 1)
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.d_model % 2:
            raise ConfigError(f"d_model ({self.d_model}) must be even for sinusoidal positions")
        if self.activation not in ("gelu", "relu"):
            raise ConfigError(f"activation must be 'gelu' or 'relu', got {self.activation!r}")
        if self.positional not in POSITIONALS:
            raise ConfigError(f"positional must be one of {POSITIONALS}, got {self.positional!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.norm == "post" and self.is_encoder_decoder:
            raise ConfigError("norm 'post' is only supported for decoder models")
        if not isinstance(self.layer_norm_eps, (int, float)) or not self.layer_norm_eps > 0:
            raise ConfigError(f"layer_norm_eps must be a positive number, got {self.layer_norm_eps!r}")
        for name in ("scale_embeddings", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool")
        for name in ("bos_id", "eos_id", "pad_id", "unk_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ConfigError(f"{name} must be a token id in [0, {self.vocab_size}), got {value!r}")
        if not self.decoder_layers:
            raise ConfigError("decoder_layers must not be empty")
        if self.is_encoder_decoder and not self.encoder_layers:
            raise ConfigError("an encoder-decoder model needs encoder_layers")
        if not self.is_encoder_decoder and self.encoder_layers:
            raise ConfigError("a decoder model must not have encoder_layers")
        for stack, layers, position in (
            ("decoder_layers", self.decoder_layers, "decoder self"),
            ("encoder_layers", self.encoder_layers, "encoder self"),
        ):
            shared_slots = set()
            linformer = set()  # (slots, max_positions) of the position layers: one table per stack
            for i, layer in enumerate(layers):
                where = f"{stack}[{i}]"
                layer.attention.validate(f"{where}.attention", position)
                if layer.attention.type == "abc" and layer.attention.shared_control:
                    shared_slots.add(layer.attention.slots)
                if layer.attention.type == "abc" and layer.attention.control == "position":
                    linformer.add((layer.attention.slots, layer.attention.max_positions))
                    if len(linformer) > 1:
                        raise ConfigError(f"{where}.attention: control 'position' layers share one linformer table: they must all have the same slots and max_positions")
                has_cross = layer.cross_attention is not None
                if position == "decoder self" and self.is_encoder_decoder:
                    if not has_cross:
                        raise ConfigError(f"{where}: encoder-decoder decoder layers need 'cross_attention'")
                    layer.cross_attention.validate(f"{where}.cross_attention", "cross")
                elif has_cross:
                    raise ConfigError(f"{where}: 'cross_attention' is only for encoder-decoder decoder layers")
            if len(shared_slots) > 1:
                raise ConfigError(f"{stack}: shared_control layers must all have the same slots, got {sorted(shared_slots)}")
        self._validate_cross_linformer()
        self._validate_gmat()

    def _validate_cross_linformer(self):
        """Cross `position` layers share one [n, N_src] table (decoder.cross_linformer)."""
        table = set()
        for i, layer in enumerate(self.decoder_layers):
            cross = layer.cross_attention
            if cross is not None and cross.type == "abc" and cross.control == "position":
                table.add((cross.slots, cross.max_positions))
                if len(table) > 1:
                    raise ConfigError(f"decoder_layers[{i}].cross_attention: control 'position' cross layers share one cross_linformer table: they must all have the same slots and max_positions")

    def _validate_gmat(self):
        """A GMAT encoder: `gmat` present exactly when every encoder layer is gmat (no mix)."""
        gmat_layers = [i for i, layer in enumerate(self.encoder_layers) if layer.attention.type == "gmat"]
        if self.gmat is None:
            if gmat_layers:
                raise ConfigError(f"encoder_layers[{gmat_layers[0]}].attention: type 'gmat' needs the model-level 'gmat' object")
            return
        if not self.is_encoder_decoder:
            raise ConfigError("gmat: only an encoder-decoder model has a GMAT encoder")
        if not isinstance(self.gmat, GmatSpec):
            raise ConfigError("gmat must be an object")
        self.gmat.validate()
        for i, layer in enumerate(self.encoder_layers):
            if layer.attention.type != "gmat":
                raise ConfigError(f"encoder_layers[{i}].attention: every encoder layer must be 'gmat' when the model has 'gmat'")
        for i, layer in enumerate(self.decoder_layers):
            cross = layer.cross_attention
            if cross is not None and cross.type == "abc" and cross.control == "position":
                raise ConfigError(f"decoder_layers[{i}].cross_attention.control: 'position' reads source positions; a GMAT encoder outputs memory rows")

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise ConfigError("config must be a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown config fields {sorted(unknown)}")
        missing = {"vocab_size", "d_model", "n_heads", "d_ff", "decoder_layers"} - set(d)
        if missing:
            raise ConfigError(f"missing config fields {sorted(missing)}")
        fields = dict(d)
        for stack in ("decoder_layers", "encoder_layers"):
            if stack in fields:
                if not isinstance(fields[stack], list):
                    raise ConfigError(f"{stack} must be a list")
                fields[stack] = [LayerSpec.from_dict(layer, f"{stack}[{i}]") for i, layer in enumerate(fields[stack])]
        if "gmat" in fields:
            fields["gmat"] = GmatSpec.from_dict(fields["gmat"])
        config = cls(**fields)
        config.validate()
        return config

    @property
    def max_positions(self):
        """Decoder positions the model can serve (abc `position` layers' N), 0 = unbounded."""
        return min((l.attention.max_positions for l in self.decoder_layers if l.attention.type == "abc" and l.attention.control == "position"), default=0)

    @property
    def max_source_positions(self):
        """Source tokens the model can encode (N of encoder / cross `position` tables), 0 = unbounded."""
        limits = [l.attention.max_positions for l in self.encoder_layers if l.attention.type == "abc" and l.attention.control == "position"]
        limits += [l.cross_attention.max_positions for l in self.decoder_layers if l.cross_attention is not None and l.cross_attention.type == "abc" and l.cross_attention.control == "position"]
        return min(limits, default=0)

    def to_dict(self):
        out = {
            "format_version": self.format_version,
            "architecture": self.architecture,
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "d_ff": self.d_ff,
            "activation": self.activation,
            "layer_norm_eps": self.layer_norm_eps,
            "scale_embeddings": self.scale_embeddings,
            "tie_embeddings": self.tie_embeddings,
            "positional": self.positional,
        }
        if self.norm != "pre":  # written only when post (older configs stay byte-identical)
            out["norm"] = self.norm
        out.update({
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "decoder_layers": [layer.to_dict() for layer in self.decoder_layers],
        })
        if self.is_encoder_decoder:
            out["encoder_layers"] = [layer.to_dict() for layer in self.encoder_layers]
        if self.gmat is not None:
            out["gmat"] = self.gmat.to_dict()
        return out

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def save(self, path):
        self.validate()
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
