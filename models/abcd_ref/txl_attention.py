"""Transformer-XL relative-position attention (`{"type": "txl", "memory": M, "clamp_len": C}`).

Dai et al. 2019, following the published code (kimiyoung/transformer-xl,
RelPartialLearnableMultiHeadAttn): per head, query t attends to keys j in [t - M, t] with

    s_j = ((q + u).k_j + (q + v).p_{min(t - j, C)}) / sqrt(dh)

q, k, v the layer's projections (FORMAT.md's q/k/v with their biases; no 1/sqrt(dh) pre-scale of
q here: the sum is scaled), u = r_w_bias[h], v = r_r_bias[h] (owned by the stack, shared by all
txl layers), p_r = r(R_r) the layer's bias-free projection `attn.r` of the sinusoid
R_r = [sin(r w_0..w_{D/2-1}), cos(r w_0..w_{D/2-1})], w_i = 10000^(-2i/D), D = d_model (halves
concatenated, not FORMAT.md's interleaved pe), built in float64.

Parallel form: the band mask j in [t - M, t] with the relative term gathered per (t, j).
Recurrent form: the last M + 1 keys and values, update-then-read (abcd's `window` of M + 1 plus
the relative term); the distance of a kept key follows from its place, no positions stored.
"""

import math

import torch
import torch.nn as nn

from .attention_base import SelfAttention


def relative_sinusoids(count, d_model):
    """R [count, D] float64 for distances r = 0..count-1: [sin(r w_i)..., cos(r w_i)...]."""
    r = torch.arange(count, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = r * torch.pow(torch.tensor(10000.0, dtype=torch.float64), -two_i / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


class TxlAttention(SelfAttention):
    """Causal relative-position softmax attention over the current token and the M before it."""

    def __init__(self, d_model, n_heads, memory, clamp_len, biases):
        super().__init__(d_model, n_heads, causal=True)
        self.memory, self.clamp_len = memory, clamp_len
        self.r = nn.Linear(d_model, d_model, bias=False)
        # () -> (r_w_bias, r_r_bias) [H, dh]: the stack's parameters (not registered here).
        object.__setattr__(self, "_biases", biases)
        # Training only (models/train.py, SCTXL section 2.2): with this probability per forward
        # pass, the queries of each head attend to the keys/values/positions of a randomly
        # permuted head. Never used by step() or by a model in eval mode.
        self.cross_head_p = 0.0

    def positions(self, like):
        """p [H, R, dh] for distances 0..R-1, R = min(M, C) + 1 (row r is distance min(r, C))."""
        count = min(self.memory, self.clamp_len) + 1
        table = relative_sinusoids(count, self.r.weight.shape[1]).to(dtype=like.dtype, device=like.device)
        return self.r(table).view(count, self.n_heads, self.head_dim).transpose(0, 1)

    def _scores_and_values(self, q, k, v, p, distances, mask):
        """Softmax read: q [B,H,T,dh], k, v [B,H,S,dh], p [H,R,dh], distances [T,S] (indices into p)."""
        u, w = self._biases()
        content = (q + u[None, :, None, :].to(q)) @ k.transpose(-1, -2)  # [B, H, T, S]
        position = (q + w[None, :, None, :].to(q)) @ p.transpose(-1, -2)  # [B, H, T, R]
        b, h, t, _ = q.shape
        index = distances[None, None].expand(b, h, t, distances.shape[1])
        scores = (content + torch.gather(position, 3, index)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    def _cross_head(self, k, v, p):
        """Stochastic cross-head attention (training only): permute the heads of k, v and p."""
        if not self.training or self.cross_head_p <= 0 or torch.rand(()) >= self.cross_head_p:
            return k, v, p
        perm = torch.randperm(self.n_heads, device=k.device)
        return k[:, perm], v[:, perm], p[perm]

    def attend(self, x, memory_k=None, memory_v=None):
        """Parallel form over x [B, T, d] after `memory` keys/values [B, H, m, dh] (m <= M, the
        positions just before x; None = none). Returns (heads [B, H, T, dh], k, v of x)."""
        b, t, _ = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        m = 0 if memory_k is None else memory_k.shape[2]
        keys = k if m == 0 else torch.cat([memory_k, k], dim=2)
        values = v if m == 0 else torch.cat([memory_v, v], dim=2)
        p = self.positions(q)
        keys_x, values_x, p_x = self._cross_head(keys, values, p)
        query_pos = torch.arange(m, m + t, device=x.device)
        key_pos = torch.arange(m + t, device=x.device)
        back = query_pos[:, None] - key_pos[None, :]  # t - j
        mask = (back >= 0) & (back <= self.memory)
        distances = back.clamp(0, min(self.memory, self.clamp_len))
        return self._scores_and_values(q, keys_x, values_x, p_x, distances, mask), k, v

    def parallel(self, x):
        return self.attend(x)[0]

    def init_state(self, batch):
        empty = self._state_zeros(batch, self.n_heads, 0, self.head_dim)
        return {"k": empty, "v": empty}

    def update(self, state, x_t):
        span = self.memory + 1
        k = torch.cat([state["k"], self._heads(self.k(x_t))], dim=2)[:, :, -span:]
        v = torch.cat([state["v"], self._heads(self.v(x_t))], dim=2)[:, :, -span:]
        return {"k": k, "v": v}

    def read(self, state, x_t):
        k, v = state["k"], state["v"]
        count = k.shape[2]
        q = self._heads(self.q(x_t))
        back = torch.arange(count - 1, -1, -1, device=k.device)[None, :]  # oldest first
        distances = back.clamp(max=min(self.memory, self.clamp_len))
        mask = torch.ones(1, count, dtype=torch.bool, device=k.device)
        return self._scores_and_values(q, k, v, self.positions(q), distances, mask)

