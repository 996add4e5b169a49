"""GSA (Gated Slot Attention, fla `model_type: gsa`): a bounded slot memory with a forget gate.

Per head and slot j: f_j = logsigmoid(a_j) / gate_logit_normalizer, alpha_j = exp(f_j),
s_j = 1 - alpha_j; key memory Kt[:, j] = alpha_j Kt[:, j] + s_j k; p = softmax_j(q . Kt[:, j]) (scale 1);
value memory Vt[j] = alpha_j Vt[j] + s_j v; y = sum_j p_j Vt[j]. q, k = phi(projections) with phi silu,
relu or t2r (relu of a shared [K, K] linear); v = silu(W_v u). Heads concatenated, silu, RMSNorm over
the whole value width (g_norm, eps norm_eps), o_proj. GQA repeats k, v and the gate logits per query
head. With use_short_conv, W_q u, W_k u and W_v u pass through their short convolutions (silu) first
(short_conv.py). State per sequence: Kt [B, H, K, M] and Vt [B, H, M, V] (fp32), plus the convolutions'
last conv_size - 1 inputs. Not thread-safe.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .short_conv import add_short_convs, init_conv_state, project
from .skeleton import RMSNorm, repeat_heads


class T2RFeatureMap(nn.Module):
    """phi(x) = relu(W x) per head; tensor `feature_map.layer.weight [K, K]` (no bias)."""

    def __init__(self, dim):
        super().__init__()
        self.layer = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        return F.relu(self.layer(x))


class GatedSlotAttention(nn.Module):
    def __init__(self, c, layer_idx=0):
        super().__init__()
        self.c = c
        d, kv = c.hidden_size, c.num_kv_heads
        self.q_proj = nn.Linear(d, c.key_dim, bias=False)
        self.k_proj = nn.Linear(d, kv * c.head_k_dim, bias=False)
        self.v_proj = nn.Linear(d, kv * c.head_v_dim, bias=False)
        self.f_proj = nn.Linear(d, kv * c.num_slots, bias=False)
        if c.feature_map == "t2r":
            self.feature_map = T2RFeatureMap(c.head_k_dim)
        self.g_norm = RMSNorm(c.value_dim, c.norm_eps)
        self.o_proj = nn.Linear(c.value_dim, d, bias=False)
        add_short_convs(self, c, [("q", c.key_dim), ("k", kv * c.head_k_dim), ("v", kv * c.head_v_dim)], "silu")

    def _phi(self, x):
        if self.c.feature_map == "swish":
            return F.silu(x)
        if self.c.feature_map == "relu":
            return F.relu(x)
        return self.feature_map(x)

    def _inputs(self, u, convs=None):
        """u [..., d] -> q [..., H, K], k [..., H, K], v [..., H, V], log alpha f [..., H, M] (GQA repeated);
        convs: the step's convolution caches (short_conv.project)."""
        c = self.c
        lead = u.shape[:-1]
        q, k, v = project(self, ("q", "k", "v"), u, convs)
        q = self._phi(q.view(*lead, c.num_heads, c.head_k_dim))
        k = self._phi(k.view(*lead, c.num_kv_heads, c.head_k_dim))
        v = F.silu(v).view(*lead, c.num_kv_heads, c.head_v_dim)
        f = F.logsigmoid(self.f_proj(u).view(*lead, c.num_kv_heads, c.num_slots)) / c.gate_logit_normalizer
        dim = len(lead)
        return q, repeat_heads(k, c.groups, dim), repeat_heads(v, c.groups, dim), repeat_heads(f, c.groups, dim)

    def _output(self, y):
        """y [..., H, V] -> o_proj(RMSNorm(silu(concat heads)))."""
        z = F.silu(y.reshape(*y.shape[:-2], self.c.value_dim))
        return self.o_proj(self.g_norm(z))

    def init_state(self, batch, dtype):
        c = self.c
        return {
            "k": torch.zeros(batch, c.num_heads, c.head_k_dim, c.num_slots, dtype=dtype),
            "v": torch.zeros(batch, c.num_heads, c.num_slots, c.head_v_dim, dtype=dtype),
            "conv": init_conv_state(self, batch, dtype),
        }

    def step(self, u, state, position=None):
        convs = dict(state["conv"])
        q, k, v, f = self._inputs(u, convs)  # [B, H, *]
        alpha = f.exp()
        s = 1 - alpha
        key_mem = alpha[:, :, None, :] * state["k"] + s[:, :, None, :] * k[..., None]
        scores = torch.einsum("bhk,bhkm->bhm", q, key_mem)
        p = scores.softmax(-1)
        value_mem = alpha[..., None] * state["v"] + s[..., None] * v[:, :, None, :]
        y = torch.einsum("bhm,bhmv->bhv", p, value_mem)
        return self._output(y), {"k": key_mem, "v": value_mem, "conv": convs}

    # Chunk length of the training form (gsa_chunked); None = the naive T x T form below.
    chunk = None

    def forward(self, u):
        """Naive parallel form over u [B, T, d] from zero memories (both gated passes as T x T sums)."""
        q, k, v, f = self._inputs(u)  # [B, T, H, *]
        if self.chunk:
            return self._output(gsa_chunked(q, k, v, f, self.chunk))
        t = u.shape[1]
        cum = f.cumsum(1)
        diff = cum[:, :, None] - cum[:, None, :]  # [B, T(t), T(s), H, M]
        causal = torch.ones(t, t, dtype=torch.bool).tril()[None, :, :, None, None]
        decay = torch.where(causal, diff, torch.full_like(diff, -float("inf"))).exp()
        written = decay * (1 - f.exp())[:, None]  # weight of token s in slot j at time t
        scores = torch.einsum("bthk,bshk,btshm->bthm", q, k, written)
        p = scores.softmax(-1)
        y = torch.einsum("bthm,btshm,bshv->bthv", p, written, v)
        return self._output(y)


def gsa_chunked(q, k, v, f, chunk):
    """The naive form's y [B, T, H, V] a chunk at a time (training; equal up to rounding).

    q, k [B, T, H, K], v [B, T, H, V], f = log alpha [B, T, H, M]. With F the running sum of f inside
    the chunk and s = 1 - alpha, the memories after the previous chunks (Kt [B, H, K, M], Vt [B, H, M, V])
    are carried: scores_t = exp(F_t) (q_t Kt) + sum_{i<=t} (q_t . k_i) s_i exp(F_t - F_i); p = softmax;
    y_t = (p_t exp(F_t)) Vt + sum_{i<=t} (sum_j p_tj s_ij exp(F_tj - F_ij)) v_i. Cost O(T C M) per head.
    """
    b, t, h, dk = q.shape
    q, k, v, f = (x.transpose(1, 2) for x in (q, k, v, f))  # [B, H, T, *]
    key_mem = q.new_zeros(b, h, dk, f.shape[-1])
    value_mem = q.new_zeros(b, h, f.shape[-1], v.shape[-1])
    outs = []
    for start in range(0, t, chunk):
        fc, qc, kc, vc = (x[:, :, start : start + chunk] for x in (f, q, k, v))
        n = fc.shape[2]
        cum = fc.cumsum(2)  # [B, H, C, M]
        s = 1 - fc.exp()
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()[:, :, None]
        diff = cum[:, :, :, None] - cum[:, :, None, :]  # [B, H, C(t), C(i), M]
        decay = torch.where(causal, diff, torch.full_like(diff, -float("inf"))).exp() * s[:, :, None]
        qk = qc @ kc.transpose(-1, -2)  # [B, H, C, C]
        scores = cum.exp() * (qc @ key_mem) + torch.einsum("bhti,bhtim->bhtm", qk, decay)
        p = scores.softmax(-1)
        mix = torch.einsum("bhtm,bhtim->bhti", p, decay)
        outs.append((p * cum.exp()) @ value_mem + mix @ vc)
        last = cum[:, :, -1:]  # [B, H, 1, M]
        carry = (last - cum).exp() * s  # weight of token i in the memories at the chunk's end
        key_mem = key_mem * last.exp() + kc.transpose(-1, -2) @ carry
        value_mem = value_mem * last[:, :, 0, :, None].exp() + carry.transpose(-1, -2) @ vc
    return torch.cat(outs, 2).transpose(1, 2)
