"""Gated DeltaNet (fla `model_type: gated_deltanet`, fla/layers/gated_deltanet.py): the gated delta rule.

q, k, v = silu(short_conv(W u)) (without use_short_conv: silu(W u)); q and k L2-normalised per head,
x / sqrt(sum x^2 + 1e-6), q scaled by K^-0.5; beta = sigmoid(b_proj u) (x2 with allow_neg_eigval);
g = -exp(A_log) * softplus(a_proj u + dt_bias) (softplus(x) = x above 20). Per value head (num_v_heads
Hv, a multiple of num_heads H: value head j reads q/k head j // (Hv / H)), state S [K, V]:
    S = exp(g) S;  v' = beta (v - S^T k);  S = S + k v'^T;  y = S^T q
(fla/ops/gated_delta_rule/naive.py, naive_recurrent_gated_delta_rule). Output per head:
RMSNorm(y; o_norm [V], norm_eps) * silu(g_proj u) (use_gate), or the norm alone; heads concatenated,
o_proj. The parallel form is fla's chunked WY form (naive_chunk_gated_delta_rule) from a zero state.
State per sequence: {"S": [B, Hv, K, V], "conv": the convolutions' last conv_size - 1 inputs}.
Not thread-safe.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .short_conv import add_short_convs, init_conv_state, project
from .skeleton import RMSNorm, repeat_heads, rms_norm


def l2_norm(x):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class GatedDeltaNet(nn.Module):
    # Chunk length of the parallel (WY) form.
    chunk = 16

    def __init__(self, c, layer_idx=0):
        super().__init__()
        self.c = c
        d = c.hidden_size
        self.q_proj = nn.Linear(d, c.key_dim, bias=False)
        self.k_proj = nn.Linear(d, c.key_dim, bias=False)
        self.v_proj = nn.Linear(d, c.value_dim, bias=False)
        self.a_proj = nn.Linear(d, c.num_v_heads, bias=False)
        self.b_proj = nn.Linear(d, c.num_v_heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(c.num_v_heads))
        self.dt_bias = nn.Parameter(torch.zeros(c.num_v_heads))
        add_short_convs(self, c, [("q", c.key_dim), ("k", c.key_dim), ("v", c.value_dim)], "silu")
        if c.use_gate:
            self.g_proj = nn.Linear(d, c.value_dim, bias=False)
        self.o_norm = RMSNorm(c.head_v_dim, c.norm_eps)
        self.o_proj = nn.Linear(c.value_dim, d, bias=False)

    def _inputs(self, u, convs=None):
        """u [..., d] -> q, k [..., Hv, K] (repeated per value head), v [..., Hv, V], beta, log decay g [..., Hv]."""
        c = self.c
        lead = u.shape[:-1]
        q, k, v = project(self, ("q", "k", "v"), u, convs)
        if not c.use_short_conv:
            q, k, v = F.silu(q), F.silu(k), F.silu(v)
        q = l2_norm(q.view(*lead, c.num_heads, c.head_k_dim)) * c.head_k_dim**-0.5
        k = l2_norm(k.view(*lead, c.num_heads, c.head_k_dim))
        groups, dim = c.num_v_heads // c.num_heads, len(lead)
        beta = torch.sigmoid(self.b_proj(u)) * (2.0 if c.allow_neg_eigval else 1.0)
        g = -self.A_log.exp() * F.softplus(self.a_proj(u) + self.dt_bias, beta=1.0, threshold=20.0)
        v = v.view(*lead, c.num_v_heads, c.head_v_dim)
        return repeat_heads(q, groups, dim), repeat_heads(k, groups, dim), v, beta, g

    def _output(self, y, u):
        c = self.c
        if c.use_gate:
            gate = self.g_proj(u).view(*y.shape)
            y = rms_norm(y, self.o_norm.weight, c.norm_eps) * F.silu(gate)
        else:
            y = self.o_norm(y)
        return self.o_proj(y.reshape(*y.shape[:-2], c.value_dim))

    def init_state(self, batch, dtype):
        c = self.c
        S = torch.zeros(batch, c.num_v_heads, c.head_k_dim, c.head_v_dim, dtype=dtype)
        return {"S": S, "conv": init_conv_state(self, batch, dtype)}

    def step(self, u, state, position=None):
        convs = dict(state["conv"])
        q, k, v, beta, g = self._inputs(u, convs)  # [B, Hv, *]
        S = state["S"] * g.exp()[..., None, None]
        delta = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", S, k))
        S = S + k[..., :, None] * delta[..., None, :]
        y = torch.einsum("bhkv,bhk->bhv", S, q)
        return self._output(y, u), {"S": S, "conv": convs}

    def forward(self, u):
        q, k, v, beta, g = self._inputs(u)  # [B, T, Hv, *]
        return self._output(delta_rule_chunked(q, k, v, beta, g, self.chunk), u)


def delta_rule_chunked(q, k, v, beta, g, chunk):
    """y [B, T, H, V] of the gated delta rule from a zero state, chunk by chunk in the WY form (fla's
    naive_chunk_gated_delta_rule, in the inputs' dtype). q, k [B, T, H, K], v [B, T, H, V], beta and
    the log decay g [B, T, H]; q already scaled."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    pad = (chunk - t % chunk) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)).transpose(1, 2) for x in (q, k, v))  # [B, H, T', *]
    beta, g = (F.pad(x, (0, 0, 0, pad)).transpose(1, 2) for x in (beta, g))  # [B, H, T']
    n = q.shape[2] // chunk
    q, k, v = (x.reshape(b, h, n, chunk, x.shape[-1]) for x in (q, k, v))
    beta, g = (x.reshape(b, h, n, chunk) for x in (beta, g))
    k_beta, v = k * beta[..., None], v * beta[..., None]
    decay = g.cumsum(-1)  # [B, H, N, C]
    upper = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=0)
    L = (decay[..., :, None] - decay[..., None, :]).tril().exp().tril()
    attn = -((k_beta @ k.transpose(-1, -2)) * L).masked_fill(upper, 0)
    for i in range(1, chunk):  # forward substitution: (I + A)^-1 row by row
        attn[..., i, :i] = attn[..., i, :i].clone() + (attn[..., i, :i, None].clone() * attn[..., :i, :i].clone()).sum(-2)
    attn = attn + torch.eye(chunk, dtype=q.dtype)
    u_new = attn @ v
    w = attn @ (k_beta * decay.exp()[..., None])
    S = q.new_zeros(b, h, dk, dv)
    out = torch.zeros_like(u_new)
    strict = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=1)
    for i in range(n):
        q_i, k_i, d_i = q[:, :, i], k[:, :, i], decay[:, :, i]
        scores = (q_i @ k_i.transpose(-1, -2) * L[:, :, i]).masked_fill(strict, 0)
        v_new = u_new[:, :, i] - w[:, :, i] @ S
        out[:, :, i] = (q_i * d_i[..., None].exp()) @ S + scores @ v_new
        S = S * d_i[..., -1, None, None].exp() + (k_i * (d_i[..., -1, None] - d_i).exp()[..., None]).transpose(-1, -2) @ v_new
    return out.reshape(b, h, n * chunk, dv)[:, :, :t].transpose(1, 2)
