"""Kernelised linear attention: the RFA random features, T2R's learned map and elu + 1 (models/FORMAT.md)."""

import math
import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention_base import SelfAttention, _causal_mask


class LinearAttention(SelfAttention):
    """Kernelised attention: S += phi(k) v^T, z += phi(k); out = S^T phi(q) / max(phi(q).z, eps).

    Subclasses define the feature map (`features`, over [B, H, T, dh]) and the feature count.
    """

    def __init__(self, d_model, n_heads, eps, causal=True):
        super().__init__(d_model, n_heads, causal)
        self.eps = eps

    def features(self, x):
        raise NotImplementedError

    def feature_count(self):
        raise NotImplementedError

    def _key(self, x):
        return self._heads(self.k(x))

    def _time_weights(self, x):
        """Optional [B, H, T(query), T(key)] weights of each key per query (gated rfa)."""
        return None

    def _gate(self, x_t):
        """Optional decay g [B, H] for the update S = g S + (1 - g) phi(k) v^T (gated rfa)."""
        return None

    def parallel(self, x):
        fq, fk = self.features(self._query(x)), self.features(self._key(x))
        v = self._heads(self.v(x))
        scores = fq @ fk.transpose(-1, -2)  # phi(q_t) . phi(k_i)
        time_weights = self._time_weights(x)
        if time_weights is not None:
            scores = scores * time_weights
        if self.causal:
            scores = scores.masked_fill(~_causal_mask(x.shape[1], x.device), 0.0)
        denominator = scores.sum(-1, keepdim=True)
        return (scores @ v) / denominator.clamp_min(self.eps)

    def init_state(self, batch):
        f = self.feature_count()
        return {"S": self._state_zeros(batch, self.n_heads, f, self.head_dim), "z": self._state_zeros(batch, self.n_heads, f)}

    def update(self, state, x_t):
        fk = self.features(self._key(x_t))[:, :, 0]  # [B, H, F]
        v = self._heads(self.v(x_t))[:, :, 0]  # [B, H, dh]
        outer = fk[..., None] * v[:, :, None, :]
        g = self._gate(x_t)
        if g is None:
            return {"S": state["S"] + outer, "z": state["z"] + fk}
        return {
            "S": g[..., None, None] * state["S"] + (1 - g)[..., None, None] * outer,
            "z": g[..., None] * state["z"] + (1 - g)[..., None] * fk,
        }

    def read(self, state, x_t):
        fq = self.features(self._query(x_t))  # [B, H, 1, F]
        numerator = fq @ state["S"]
        denominator = (fq * state["z"][:, :, None, :]).sum(-1, keepdim=True)
        return numerator / denominator.clamp_min(self.eps)


class RandomFeatureMap(nn.Module):
    """RFA features: W = sigma * W~ per row; gaussian sqrt(1/D)[sin Wx, cos Wx], arccos sqrt(1/D) relu(Wx)."""

    def __init__(self, n_heads, features, head_dim, kernel):
        super().__init__()
        self.kernel = kernel
        self.register_buffer("proj", torch.randn(n_heads, features, head_dim))
        self.sigma = nn.Parameter(torch.ones(n_heads, head_dim))

    def forward(self, x):
        w = self.proj * self.sigma[:, None, :]  # [H, D, dh]
        wx = x @ w.transpose(-1, -2)  # [B, H, T, D]
        scale = 1.0 / math.sqrt(self.proj.shape[1])
        if self.kernel == "gaussian":
            return scale * torch.cat([torch.sin(wx), torch.cos(wx)], dim=-1)
        return scale * torch.relu(wx)


class RFAAttention(LinearAttention):
    """Random feature attention on l2-normalised q and k, optionally with a learned per-head gate."""

    def __init__(self, d_model, n_heads, features, kernel, gate, eps, causal=True):
        super().__init__(d_model, n_heads, eps, causal)
        self.rfa = RandomFeatureMap(n_heads, features, self.head_dim, kernel)
        self.gate = nn.Linear(d_model, n_heads) if gate else None

    def features(self, x):
        return self.rfa(x)

    def feature_count(self):
        d = self.rfa.proj.shape[1]
        return 2 * d if self.rfa.kernel == "gaussian" else d

    def _query(self, x):
        return F.normalize(self._heads(self.q(x)), dim=-1, eps=1e-12)

    def _key(self, x):
        return F.normalize(self._heads(self.k(x)), dim=-1, eps=1e-12)

    def _time_weights(self, x):
        # Key i reaches query t >= i with weight (1 - g_i) prod_{i < m <= t} g_m, computed in log space
        # from the cumulative sum c of log g: exp(c_t - c_i + log(1 - g_i)).
        if self.gate is None:
            return None
        z = self.gate(x).transpose(1, 2)  # [B, H, T]
        c = torch.cumsum(F.logsigmoid(z), dim=-1)
        log_w = c[..., :, None] - c[..., None, :] + F.logsigmoid(-z)[..., None, :]
        return log_w.masked_fill(~_causal_mask(x.shape[1], x.device), float("-inf")).exp()

    def _gate(self, x_t):
        return None if self.gate is None else torch.sigmoid(self.gate(x_t)[:, 0])


class HeadLinear(nn.Module):
    """Per-head affine map: weight [H, r, dh], bias [H, r]; [B, H, T, dh] -> [B, H, T, r]."""

    def __init__(self, n_heads, features, head_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_heads, features, head_dim))
        self.bias = nn.Parameter(torch.zeros(n_heads, features))
        nn.init.normal_(self.weight, std=head_dim**-0.5)

    def forward(self, x):
        return x @ self.weight.transpose(-1, -2) + self.bias[:, None, :]


class T2RAttention(LinearAttention):
    """T2R: learned feature map phi(x) = relu(W_h x + b_h) on the scaled q and on k."""

    def __init__(self, d_model, n_heads, features, eps, causal=True):
        super().__init__(d_model, n_heads, eps, causal)
        self.t2r = HeadLinear(n_heads, features, self.head_dim)

    def features(self, x):
        return torch.relu(self.t2r(x))

    def feature_count(self):
        return self.t2r.weight.shape[1]


class ELUAttention(LinearAttention):
    """Linear attention with phi(x) = elu(x) + 1."""

    def features(self, x):
        return F.elu(x) + 1

    def feature_count(self):
        return self.head_dim
