"""GLA, RetNet and HGRN2 mixers (fla `model_type` gla / retnet / hgrn2): one key-wise gated linear
recurrence per head, S = diag(lambda) S + k v^T, y = S^T (q * K^-0.5) (skeleton.gated_step), with

- GLA: lambda = exp(max(logsigmoid(gk_proj(u)) / 16, clamp_min)) per key channel (low-rank gate with
  bias); optional feature map on q and k; per-head RMSNorm of y (shared [V] weight, eps norm_eps)
  times silu of the output gate g_proj(u) (or the norm alone without output gate).
- RetNet: half-split RoPE (base 10000, dim K) on q and k at the absolute position; fixed per-head
  decay gamma_h = 1 - 2^(-5-h); output as GLA.
- HGRN2: q = silu(W_q u); log forget g = logsigmoid(W_f u), or from layer 1 on with the model's lower
  bound lb: g = log(lb + (1 - lb) sigmoid(W_f u)); key k = 1 - exp(g); value i = W_i u; RMSNorm over
  the whole width d (g_norm, eps norm_eps), no gate.
GQA (GLA/RetNet num_kv_heads) repeats k, v and the gate per query head. With use_short_conv, GLA's
q, k, v projections pass through short convolutions with silu, HGRN2's q, f, i through ones without
activation, before everything above (short_conv.py; fla never gives RetNet one). State per sequence:
S [B, H, K, V] fp32 (RetNet also the position, kept by the model); with short convolutions
{"S": S, "conv": the last conv_size - 1 inputs of each}. Not thread-safe.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .config import GLA_GATE_LOGIT_NORMALIZER, GLA_GATE_LOW_RANK_DIM
from .short_conv import add_short_convs, init_conv_state, project
from .skeleton import RMSNorm, apply_rope, gated_parallel, gated_step, repeat_heads, rms_norm, rope_inv_freq

_ACTIVATIONS = {
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": F.gelu,
}
RETNET_ROPE_BASE = 10000.0


def retnet_decays(num_heads):
    """gamma_h = 1 - 2^(-5-h), h = 0..H-1 (exact in fp32 and fp64)."""
    return 1 - 2.0 ** (-5.0 - torch.arange(num_heads, dtype=torch.float64))


class _GatedLinearBase(nn.Module):
    """Shared projections and output path of GLA and RetNet."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        d, kv = c.hidden_size, c.num_kv_heads
        self.q_proj = nn.Linear(d, c.key_dim, bias=False)
        self.k_proj = nn.Linear(d, kv * c.head_k_dim, bias=False)
        self.v_proj = nn.Linear(d, kv * c.head_v_dim, bias=False)
        if c.use_output_gate:
            self.g_proj = nn.Linear(d, c.value_dim, bias=False)
            self.g_norm_swish_gate = RMSNorm(c.head_v_dim, c.norm_eps)
        else:
            self.g_norm = RMSNorm(c.head_v_dim, c.norm_eps)
        self.o_proj = nn.Linear(c.value_dim, d, bias=False)

    def _qkv(self, u, convs=None):
        """u [..., d] -> q [..., H, K] (scaled by K^-0.5 later), k [..., Hkv, K], v [..., H, V] (v repeated)."""
        c = self.c
        lead = u.shape[:-1]
        q, k, v = project(self, ("q", "k", "v"), u, convs)
        q = q.view(*lead, c.num_heads, c.head_k_dim)
        k = k.view(*lead, c.num_kv_heads, c.head_k_dim)
        if c.feature_map is not None:
            q, k = _ACTIVATIONS[c.feature_map](q), _ACTIVATIONS[c.feature_map](k)
        v = v.view(*lead, c.num_kv_heads, c.head_v_dim)
        return q, k, repeat_heads(v, c.groups, len(lead))

    def _output(self, y, u):
        """y [..., H, V] -> o_proj(concat_h(RMSNorm(y_h) * silu(g_h)))."""
        c = self.c
        if c.use_output_gate:
            gate = self.g_proj(u).view(*y.shape)
            y = rms_norm(y, self.g_norm_swish_gate.weight, c.norm_eps) * F.silu(gate)
        else:
            y = self.g_norm(y)
        return self.o_proj(y.reshape(*y.shape[:-2], c.value_dim))

    def init_state(self, batch, dtype):
        c = self.c
        return with_convs(self, torch.zeros(batch, c.num_heads, c.head_k_dim, c.head_v_dim, dtype=dtype), batch)


def with_convs(mixer, state, batch):
    """The layer state: S alone, or {"S": S, "conv": caches} for a mixer with short convolutions."""
    return {"S": state, "conv": init_conv_state(mixer, batch, state.dtype)} if mixer.conv_names else state


def split_convs(state):
    """(S, a copy of the convolution caches or None) of a layer state."""
    return (state["S"], dict(state["conv"])) if isinstance(state, dict) else (state, None)


def join_convs(state, convs):
    return state if convs is None else {"S": state, "conv": convs}


class GatedLinearAttention(_GatedLinearBase):
    def __init__(self, c, layer_idx=0):
        super().__init__(c)
        d, kv = c.hidden_size, c.num_kv_heads
        self.gk_proj = nn.Sequential(
            nn.Linear(d, GLA_GATE_LOW_RANK_DIM, bias=False), nn.Linear(GLA_GATE_LOW_RANK_DIM, kv * c.head_k_dim, bias=True)
        )
        add_short_convs(self, c, [("q", c.key_dim), ("k", kv * c.head_k_dim), ("v", kv * c.head_v_dim)], "silu")

    def _inputs(self, u, convs=None):
        c = self.c
        lead = u.shape[:-1]
        q, k, v = self._qkv(u, convs)
        g = F.logsigmoid(self.gk_proj(u)) / GLA_GATE_LOGIT_NORMALIZER
        if c.clamp_min is not None:
            g = g.clamp_min(c.clamp_min)
        g = g.view(*lead, c.num_kv_heads, c.head_k_dim)
        dim = len(lead)
        return q * c.head_k_dim**-0.5, repeat_heads(k, c.groups, dim), v, repeat_heads(g, c.groups, dim)

    def step(self, u, state, position=None):
        state, convs = split_convs(state)
        q, k, v, g = self._inputs(u, convs)
        y, state = gated_step(state, q, k, v, log_decay=g)
        return self._output(y, u), join_convs(state, convs)

    def forward(self, u):
        q, k, v, g = self._inputs(u)
        return self._output(gated_parallel(q, k, v, g), u)


class MultiScaleRetention(_GatedLinearBase):
    def __init__(self, c, layer_idx=0):
        super().__init__(c)
        self.conv_names = []  # fla never passes use_short_conv to its RetNet layer
        self.register_buffer("inv_freq", rope_inv_freq(c.head_k_dim, RETNET_ROPE_BASE), persistent=False)
        self.register_buffer("decays", retnet_decays(c.num_heads), persistent=False)

    def _inputs(self, u, positions):
        c = self.c
        q, k, v = self._qkv(u)
        q, k = apply_rope(q, positions, self.inv_freq), apply_rope(k, positions, self.inv_freq)
        return q * c.head_k_dim**-0.5, repeat_heads(k, c.groups, k.dim() - 2), v

    def step(self, u, state, position):
        q, k, v = self._inputs(u[:, None], torch.tensor([position]))
        y, state = gated_step(state, q[:, 0], k[:, 0], v[:, 0], decay=self.decays)
        return self._output(y, u), state

    def forward(self, u):
        t = u.shape[1]
        q, k, v = self._inputs(u, torch.arange(t))
        log_decay = self.decays.log().to(u.dtype)[None, None, :, None].expand(*q.shape)
        return self._output(gated_parallel(q, k, v, log_decay), u)


class HGRN2Attention(nn.Module):
    def __init__(self, c, layer_idx=0):
        super().__init__()
        self.c = c
        d = c.hidden_size
        self.q_proj = nn.Linear(d, c.key_dim, bias=False)
        self.f_proj = nn.Linear(d, c.key_dim, bias=False)
        self.i_proj = nn.Linear(d, c.value_dim, bias=False)
        self.g_norm = RMSNorm(c.value_dim, c.norm_eps)
        self.o_proj = nn.Linear(c.value_dim, d, bias=False)
        add_short_convs(self, c, [("q", c.key_dim), ("f", c.key_dim), ("i", c.value_dim)], None)

    def _inputs(self, u, lower_bound, convs=None):
        c = self.c
        lead = u.shape[:-1]
        q, f, i = project(self, ("q", "f", "i"), u, convs)
        q = F.silu(q)
        if lower_bound is None:
            g = F.logsigmoid(f)
        else:
            lb = lower_bound.to(f.dtype)
            g = torch.logaddexp(lb.log(), torch.log1p(-lb) + F.logsigmoid(f))
        k = 1 - g.exp()
        heads = lambda x, dim: x.view(*lead, c.num_heads, dim)  # noqa: E731
        q = heads(q, c.head_k_dim) * c.head_k_dim**-0.5
        return q, heads(k, c.head_k_dim), heads(i, c.head_v_dim), heads(g, c.head_k_dim)

    def _output(self, y):
        return self.o_proj(self.g_norm(y.reshape(*y.shape[:-2], self.c.value_dim)))

    def init_state(self, batch, dtype):
        c = self.c
        return with_convs(self, torch.zeros(batch, c.num_heads, c.head_k_dim, c.head_v_dim, dtype=dtype), batch)

    def step(self, u, state, position=None, lower_bound=None):
        state, convs = split_convs(state)
        q, k, v, g = self._inputs(u, lower_bound, convs)
        y, state = gated_step(state, q, k, v, log_decay=g)
        return self._output(y), join_convs(state, convs)

    def forward(self, u, lower_bound=None):
        q, k, v, g = self._inputs(u, lower_bound)
        return self._output(gated_parallel(q, k, v, g))
