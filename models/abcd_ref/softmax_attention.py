"""Softmax attention (a KV cache) and the sliding/dilated window over it (models/FORMAT.md)."""

import torch

from .attention_base import SelfAttention, _causal_mask


def _softmax_attend(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class SoftmaxAttention(SelfAttention):
    """Exact softmax attention: causal (decoder) or bidirectional (encoder); state is a KV cache."""

    window = None
    dilation = 1

    def parallel(self, x):
        q, k, v = self._query(x), self._heads(self.k(x)), self._heads(self.v(x))
        mask = _causal_mask(x.shape[1], x.device, self.window, self.dilation) if self.causal else None
        return _softmax_attend(q, k, v, mask)

    def init_state(self, batch):
        empty = self._state_zeros(batch, self.n_heads, 0, self.head_dim)
        return {"k": empty, "v": empty}

    def update(self, state, x_t):
        k = torch.cat([state["k"], self._heads(self.k(x_t))], dim=2)
        v = torch.cat([state["v"], self._heads(self.v(x_t))], dim=2)
        if self.window is not None:
            span = (self.window - 1) * self.dilation + 1  # the ring: every key a later query needs
            k, v = k[:, :, -span:], v[:, :, -span:]
        return {"k": k, "v": v}

    def read(self, state, x_t):
        k, v = state["k"], state["v"]
        if self.dilation > 1:
            # The newest key is position t; keep t, t - dilation, ... (softmax ignores the order).
            keep = torch.arange(k.shape[2] - 1, -1, -self.dilation, device=k.device)
            k, v = k[:, :, keep], v[:, :, keep]
        return _softmax_attend(self._query(x_t), k, v)


class WindowAttention(SoftmaxAttention):
    """Causal softmax attention over `window` keys: t, t - dilation, ..., t - (window - 1) * dilation.

    dilation 1 (default) is the last `window` keys. The recurrent state is a ring of the last
    (window - 1) * dilation + 1 keys and values (the keys of the other residues are read by later
    queries), ABC-I App. A.4.
    """

    def __init__(self, d_model, n_heads, window, dilation=1):
        super().__init__(d_model, n_heads, causal=True)
        self.window = window
        self.dilation = dilation
