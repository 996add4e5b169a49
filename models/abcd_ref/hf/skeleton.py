"""Shared pieces of the HF-layout reference models: RMSNorm, SwiGLU MLP, RoPE, the key-wise gated
linear recurrence (GLA/RetNet/HGRN2 kernel) and the fla model skeleton (embeddings, pre-norm blocks,
final norm, untied or tied head).

Every model exposes the same interface: `init_state(batch)` -> state, `step(tokens [B], state)` ->
(logits [B, V], new state) (the recurrent form, the definition), and `forward(tokens [B, T])` ->
logits [B, T, V] (a parallel form, for cross-checks). States are dicts of tensors plus the position
(number of tokens already consumed); `step` never modifies its input state. Compute follows the
parameter dtype (float32, or float64 after `.double()` for conditioning checks); norm statistics and
softmaxes are at least fp32. Not thread-safe (plain torch modules).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim; statistics in fp32 (or fp64)."""
    xf = x.to(compute_dtype(x.dtype))
    y = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight).to(x.dtype)


class RMSNorm(nn.Module):
    """torch 1.13 has no RMSNorm; weight [d], no bias."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(h)) * up(h)); fla GatedMLP and HF LlamaMLP (bias only with Llama mlp_bias)."""

    def __init__(self, d, intermediate, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(d, intermediate, bias=bias)
        self.up_proj = nn.Linear(d, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, d, bias=bias)

    def forward(self, h):
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def rope_inv_freq(dim, theta, scaling=None):
    """RoPE inverse frequencies [dim/2] in fp32 as transformers computes them, with `linear` or
    `llama3` scaling (scaling: dict from config.rope_settings, or None)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if scaling is None:
        return inv_freq
    factor = scaling["factor"]
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def apply_rope(x, positions, inv_freq):
    """Half-split rotary embedding of x [..., T, H, dim] at positions [T] (pairs (x_i, x_{i+dim/2}))."""
    angles = positions.to(inv_freq.dtype)[:, None] * inv_freq[None, :]  # [T, dim/2], fp32
    cos = angles.cos().to(x.dtype)[:, None, :]
    sin = angles.sin().to(x.dtype)[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def repeat_heads(x, groups, dim):
    """GQA: kv head h serves query heads h*groups .. h*groups+groups-1 (query head j reads j // groups)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=dim)


def gated_step(state, q, k, v, log_decay=None, decay=None):
    """One step of S = diag(lambda) S + k v^T; y = S^T q. state [B, H, K, V], q/k [B, H, K], v [B, H, V];
    lambda = exp(log_decay) [B, H, K], or a per-head constant `decay` [H]."""
    lam = decay.to(state.dtype)[None, :, None, None] if decay is not None else log_decay.exp()[..., None]
    state = lam * state + k[..., :, None] * v[..., None, :]
    return torch.einsum("bhkv,bhk->bhv", state, q), state


def gated_parallel(q, k, v, log_decay):
    """Naive parallel form of gated_step from a zero state: q/k/log_decay [B, T, H, K], v [B, T, H, V].
    y_t = sum_{s<=t} (sum_c q_tc k_sc exp(G_tc - G_sc)) v_s with G the running sum of log_decay."""
    cum = log_decay.cumsum(1)
    diff = cum[:, :, None] - cum[:, None, :]  # [B, T(t), T(s), H, K]
    t = q.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, :, :, None, None]
    weights = torch.where(causal, diff, torch.full_like(diff, -float("inf"))).exp()
    scores = torch.einsum("bthc,bshc,btshc->bhts", q, k, weights)
    return torch.einsum("bhts,bshv->bthv", scores, v)


class FlaBlock(nn.Module):
    """x1 = x + attn(attn_norm(x)); x2 = x1 + mlp(mlp_norm(x1))."""

    def __init__(self, c, mixer):
        super().__init__()
        self.attn_norm = RMSNorm(c.hidden_size, c.norm_eps)
        self.attn = mixer
        self.mlp_norm = RMSNorm(c.hidden_size, c.norm_eps)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size)


class FlaModel(nn.Module):
    def __init__(self, c, make_mixer):
        super().__init__()
        self.embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(FlaBlock(c, make_mixer(c, i)) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.norm_eps)
        if getattr(c, "use_lower_bound", False):  # HGRN2
            self.lower_bounds = nn.Parameter(torch.zeros(c.num_layers, c.hidden_size))

    def layer_extras(self):
        """Per layer keyword arguments of the mixers: HGRN2's forget-gate lower bound (None for layer 0)."""
        if not hasattr(self, "lower_bounds"):
            return [{} for _ in self.layers]
        lb = self.lower_bounds.to(compute_dtype(self.lower_bounds.dtype)).softmax(0)
        lb = lb.cumsum(0) - lb[0]
        return [{"lower_bound": None if i == 0 else lb[i]} for i in range(len(self.layers))]


class FlaForCausalLM(nn.Module):
    """An fla XForCausalLM: `model.*` and `lm_head` (tied: lm_head shares the embedding)."""

    def __init__(self, c, make_mixer):
        super().__init__()
        self.config = c
        self.model = FlaModel(c, make_mixer)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.embeddings.weight

    def init_state(self, batch):
        dtype = self.lm_head.weight.dtype
        return {"position": 0, "layers": [layer.attn.init_state(batch, dtype) for layer in self.model.layers]}

    def step(self, tokens, state):
        x = self.model.embeddings(tokens)
        extras = self.model.layer_extras()
        new_layers = []
        for layer, layer_state, extra in zip(self.model.layers, state["layers"], extras):
            out, layer_state = layer.attn.step(layer.attn_norm(x), layer_state, state["position"], **extra)
            x = x + out
            x = x + layer.mlp(layer.mlp_norm(x))
            new_layers.append(layer_state)
        logits = self.lm_head(self.model.norm(x))
        return logits, {"position": state["position"] + 1, "layers": new_layers}

    def forward(self, tokens):
        x = self.model.embeddings(tokens)
        for layer, extra in zip(self.model.layers, self.model.layer_extras()):
            x = x + layer.attn(layer.attn_norm(x), **extra)
            x = x + layer.mlp(layer.mlp_norm(x))
        return self.lm_head(self.model.norm(x))


def run_recurrent(model, tokens, state=None):
    """Logits [B, T, V] of `model.step` fed tokens [B, T] one at a time; returns (logits, state)."""
    state = model.init_state(tokens.shape[0]) if state is None else state
    outputs = []
    for t in range(tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
        outputs.append(logits)
    return torch.stack(outputs, 1), state
