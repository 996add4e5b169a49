"""GMAT encoder (Gupta & Berant 2020, Eq. 3): global memory tokens beside the source.

The encoder runs over [X; X_M] (L source rows, then M memory rows). Layer 0's memory rows are the
learned `encoder.memory_embed [M, d]` (no scaling, no positional embedding: memory tokens have no
position); the source rows are the usual embed * sqrt(d) + sinusoidal PE. Every layer is a pre-LN
block whose attention has the softmax tensors (`attn.{q,k,v,o}`, shared by main and memory rows)
and the pattern of Eq. 3:
  main row i   -> the main rows of its own chunk (chunk C: rows floor(i / C) * C ..; C = 0: all
                  L main rows) plus all M memory rows;
  memory row j -> all L + M rows.
Source padding (an optional key mask) is never attended. The encoder output is
encoder.ln_f(X_M) [M, d] (`output: "memory"`, the compression of GMAT 2.1 read by the decoder's
cross attention) or encoder.ln_f([X; X_M]) [L + M, d] (`output: "all"`).

Two forms with one set of weights: `forward` computes attention chunk by chunk (what the engine
does: O(L(C + M) + M(L + M)) scores), `dense_forward` builds the full (L + M)^2 masked score
matrix; they agree to rounding (models/tests/test_gmat.py, float64).
"""

import torch
import torch.nn as nn

from .softmax_attention import SoftmaxAttention, _softmax_attend


def gmat_mask(main, memory, chunk, device=None, key_mask=None):
    """Boolean [B or 1, L + M, L + M] mask of Eq. 3, True where a query row may see a key row.

    key_mask: optional bool [B, L], True for real source tokens (padding is never attended).
    """
    total = main + memory
    pos = torch.arange(total, device=device)
    is_main = pos < main
    if chunk > 0:
        same_chunk = (pos[:, None] // chunk) == (pos[None, :] // chunk)
    else:
        same_chunk = torch.ones(total, total, dtype=torch.bool, device=device)
    # main query: same-chunk main keys or any memory key; memory query: everything.
    allowed = (is_main[:, None] & ((is_main[None, :] & same_chunk) | ~is_main[None, :])) | ~is_main[:, None]
    allowed = allowed[None]
    if key_mask is not None:
        keys = torch.cat([key_mask.bool(), torch.ones(key_mask.shape[0], memory, dtype=torch.bool, device=key_mask.device)], dim=1)
        allowed = allowed & keys[:, None, :]
    return allowed


class GmatAttention(SoftmaxAttention):
    """Softmax attention over [main; memory] rows with the GMAT pattern (bidirectional, no state)."""

    def __init__(self, d_model, n_heads, chunk):
        super().__init__(d_model, n_heads, causal=False)
        self.chunk = chunk

    def forward(self, x, main=None, key_mask=None, dense=False):
        """x [B, L + M, d] (main rows first) -> [B, L + M, d]; `main` = L."""
        if main is None:
            raise ValueError("GmatAttention needs the number of main rows (call it through GmatStack)")
        q, k, v = self._query(x), self._heads(self.k(x)), self._heads(self.v(x))
        if dense:
            mask = gmat_mask(main, x.shape[1] - main, self.chunk, x.device, key_mask)[:, None]
            return self._output(_softmax_attend(q, k, v, mask))
        return self._output(self._chunked(q, k, v, main, key_mask))

    def _chunked(self, q, k, v, main, key_mask):
        """Eq. 3 chunk by chunk: per chunk, its queries against [its keys; memory keys]."""
        mem_k, mem_v = k[:, :, main:], v[:, :, main:]
        memory = k.shape[2] - main
        keys_ok = None
        if key_mask is not None:
            keys_ok = torch.cat([key_mask.bool(), torch.ones(key_mask.shape[0], memory, dtype=torch.bool, device=k.device)], dim=1)
        chunk = self.chunk if self.chunk > 0 else max(main, 1)
        outs = []
        for lo in range(0, main, chunk):
            hi = min(lo + chunk, main)
            ck = torch.cat([k[:, :, lo:hi], mem_k], dim=2)
            cv = torch.cat([v[:, :, lo:hi], mem_v], dim=2)
            mask = None
            if keys_ok is not None:
                mask = torch.cat([keys_ok[:, lo:hi], keys_ok[:, main:]], dim=1)[:, None, None, :]
            outs.append(_softmax_attend(q[:, :, lo:hi], ck, cv, mask))
        mask = None if keys_ok is None else keys_ok[:, None, None, :]
        outs.append(_softmax_attend(q[:, :, main:], k, v, mask))  # memory rows see all rows
        return torch.cat(outs, dim=2)


def make_gmat_stack(stack_class):
    """The GmatStack class over the model's Stack (passed in to avoid a circular import)."""

    class GmatStack(stack_class):
        """Encoder stack of gmat layers with the learned memory tokens `memory_embed` [M, d]."""

        def __init__(self, config, layers):
            super().__init__(config, layers, causal=False)
            self.gmat = config.gmat
            self.memory_embed = nn.Parameter(torch.zeros(config.gmat.memory, config.d_model))

        def forward(self, x, memories=None, key_mask=None, dense=False):
            """x [B, L, d] embedded source -> encoder output [B, M, d] ("memory") or [B, L + M, d] ("all")."""
            main = x.shape[1]
            mem = self.memory_embed.to(x.dtype)[None].expand(x.shape[0], -1, -1)
            h = torch.cat([x, mem], dim=1)
            for layer in self.layers:
                h = h + layer.attn(layer.ln1(h), main, key_mask, dense)
                h = h + layer.ffn(layer.ln2(h))
            if self.gmat.output == "memory":
                h = h[:, main:]
            return self.ln_f(h)

    return GmatStack
