"""The base of every self attention module: q/k/v/o projections, head split/merge, the causal mask.

Self attention modules map a normalised layer input x [B, T, d] to o(attn(x)) [B, T, d]:
  forward(x)                 parallel (training) form over the whole sequence,
  init_state(batch)          empty decode state,
  step(x_t, state)           recurrent form for one token x_t [B, d] -> (out [B, d], state),
  forward_recurrent(x)       the recurrent form driven over a whole sequence (for parity checks).
A step first updates the state with the current token, then reads it with the current query.
Bidirectional (encoder) modules read every query against the state after the whole sequence.
Inside a module, per-head tensors are [B, H, T, ...]; a decode step uses T = 1.
"""

import math
import torch
import torch.nn as nn


def _causal_mask(t, device, window=None, dilation=1):
    """Boolean [T, T] mask, True where query t may see key i.

    i <= t; with a window also i in {t, t - dilation, ..., t - (window - 1) * dilation}
    (dilation 1: i > t - window).
    """
    pos = torch.arange(t, device=device)
    allowed = pos[None, :] <= pos[:, None]
    if window is not None:
        back = pos[:, None] - pos[None, :]  # t - i
        allowed &= back <= (window - 1) * dilation
        if dilation > 1:
            allowed &= back % dilation == 0
    return allowed


class _Projections(nn.Module):
    """q, k, v, o projections and the head split/merge helpers shared by every module."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def _heads(self, y, width=None):
        """[B, T, H*w] -> [B, H, T, w] (w = head_dim unless given)."""
        b, t, _ = y.shape
        return y.view(b, t, self.n_heads, width or self.head_dim).transpose(1, 2)

    def _output(self, heads):
        """[B, H, T, dh] -> o(concatenated heads) [B, T, d]."""
        b, h, t, dh = heads.shape
        return self.o(heads.transpose(1, 2).reshape(b, t, h * dh))

    def _query(self, x):
        return self._heads(self.q(x)) / math.sqrt(self.head_dim)

    def _state_zeros(self, *shape):
        return torch.zeros(*shape, dtype=self.q.weight.dtype, device=self.q.weight.device)


class SelfAttention(_Projections):
    """Base of the self attention modules; subclasses define parallel/init_state/update/read."""

    def __init__(self, d_model, n_heads, causal=True):
        super().__init__(d_model, n_heads)
        self.causal = causal

    def forward(self, x):
        return self._output(self.parallel(x))

    def step(self, x_t, state):
        x_t = x_t[:, None, :]
        state = self.update(state, x_t)
        return self._output(self.read(state, x_t))[:, 0], state

    def forward_recurrent(self, x):
        """Same as forward(x), computed through init_state/update/read one token at a time."""
        state = self.init_state(x.shape[0])
        steps = range(x.shape[1])
        if self.causal:
            outs = []
            for t in steps:
                out, state = self.step(x[:, t], state)
                outs.append(out)
            return torch.stack(outs, dim=1)
        for t in steps:
            state = self.update(state, x[:, t : t + 1])
        return torch.cat([self._output(self.read(state, x[:, t : t + 1])) for t in steps], dim=1)

    def parallel(self, x):
        """Per-head output [B, H, T, dh] for the whole sequence x [B, T, d]."""
        raise NotImplementedError

    def init_state(self, batch):
        raise NotImplementedError

    def update(self, state, x_t):
        """Fold one token x_t [B, 1, d] into the state; returns the new state."""
        raise NotImplementedError

    def read(self, state, x_t):
        """Per-head output [B, H, 1, dh] of the query of x_t [B, 1, d] against the state."""
        raise NotImplementedError
