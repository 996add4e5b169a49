"""Cross attention modules of models/FORMAT.md (decoder queries against the encoder output).

Each builds a memory once from the encoder output (`memory(enc_out)`) and attends to it with
`forward(x, memory)` / `step(x_t, memory)`; feature-map cross attention: forward is the parallel
form over the source positions, step reads the fixed-size (S, z) state. The self-attention
modules and the shared kernels are in abc_attention.py, linear_attention.py and
softmax_attention.py.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ABC_LEARNED_CONTROLS
from .abc_attention import CROSS_LAYER_ID, _AbcControl, _guarded_softmax, abc_read
from .attention_base import _Projections
from .linear_attention import HeadLinear, RandomFeatureMap
from .softmax_attention import _softmax_attend


class CrossAttention(_Projections):
    """Base of cross attention: queries from the decoder, memory from the encoder output."""

    def forward(self, x, memory):
        """x [B, T, d] against memory -> [B, T, d]."""
        return self._output(self.attend(self._query(x), memory))

    def step(self, x_t, memory):
        return self.forward(x_t[:, None, :], memory)[:, 0]

    def memory(self, enc_out):
        raise NotImplementedError

    def attend(self, q, memory):
        raise NotImplementedError


class SoftmaxCrossAttention(CrossAttention):
    """Softmax over all encoder positions; the memory is the projected keys and values."""

    def memory(self, enc_out):
        return {"k": self._heads(self.k(enc_out)), "v": self._heads(self.v(enc_out))}

    def attend(self, q, memory):
        return _softmax_attend(q, memory["k"], memory["v"])


class ABCCrossAttention(_AbcControl, CrossAttention):
    """ABC cross attention: K~, V~ built once from all source positions (control on enc_out).

    Any control of ABCAttention but block; source position m is the position of the `random` hash
    and the column of `position` (Linformer cross form, ABC Peng et al. 2022 Sec. 3.1: K~ = W[:, :M] K_src,
    V~ = W[:, :M] V_src with W the decoder's [n, N_src] `cross_linformer` table, shared by every
    cross position layer and head; a source longer than N_src is refused, never truncated).
    """

    def __init__(self, d_model, n_heads, slots, control="exp", seed=None, reduce=None, layer_id=0, linformer=None):
        super().__init__(d_model, n_heads)
        self.slots = slots
        self.control_kind = control
        self.seed, self.reduce, self.layer_id = seed, reduce or "mean", layer_id
        self.control = nn.Linear(d_model, n_heads * slots) if control in ABC_LEARNED_CONTROLS else None
        object.__setattr__(self, "linformer", linformer)  # position: the decoder's [n, N_src] table

    def _control_logits(self, x):
        return self._heads(self.control(x), self.slots)

    def init_memory(self, batch):
        """position: the empty memory (no source position folded in yet)."""
        return {"K": self._state_zeros(batch, self.n_heads, self.slots, self.head_dim),
                "V": self._state_zeros(batch, self.n_heads, self.slots, self.head_dim), "m": 0}

    def fold(self, memory, enc_t):
        """position: memory + source position m = memory["m"] (enc_t [B, d]): K~ += W[:, m] k, V~ += W[:, m] v."""
        k, v = self._heads(self.k(enc_t[:, None]))[:, :, 0], self._heads(self.v(enc_t[:, None]))[:, :, 0]
        phi = self._position_phi(memory["m"], 1, k)[:, :, 0, :, None]  # [1, H, n, 1]
        return {"K": memory["K"] + phi * k[:, :, None, :], "V": memory["V"] + phi * v[:, :, None, :], "m": memory["m"] + 1}

    def memory(self, enc_out):
        k, v = self._heads(self.k(enc_out)), self._heads(self.v(enc_out))
        if self.control_kind == "position":
            phi = self._position_phi(0, enc_out.shape[1], k)  # [1, H, M, n]; refuses M > N_src
            return {"K": torch.einsum("bhmn,bhmd->bhnd", phi.expand(k.shape[0], -1, -1, -1), k),
                    "V": torch.einsum("bhmn,bhmd->bhnd", phi.expand(k.shape[0], -1, -1, -1), v)}
        a = self._log_control(enc_out, 0, k)  # [B, H, M, n]
        if self.sums:
            weights, live = torch.exp(a), None
        else:
            weights, live = _guarded_softmax(a, dim=2)
        memory = {"K": torch.einsum("bhmn,bhmd->bhnd", weights, k), "V": torch.einsum("bhmn,bhmd->bhnd", weights, v)}
        if live is not None:
            memory["live"] = live
        return memory

    def attend(self, q, memory):
        live = memory.get("live")
        return abc_read(q, memory["K"][:, :, None], memory["V"][:, :, None], None if live is None else live[:, :, None])


class LinearCrossAttention(CrossAttention):
    """Feature-map cross attention for rfa, t2r and elu (the thesis's Algorithm 5, RFA-CROSS).

    The memory is built once per source: S = sum_m phi(k_m) (x) v_m [B, H, F, dh] and
    z = sum_m phi(k_m) [B, H, F]; F(dh + 1) floats per head whatever the source length M.
    Recurrent form (`step`, decoding): out = S^T phi(q) / max(phi(q) . z, eps), as the self
    attention read. Parallel form (`forward`, training): sum_m (phi(q) . phi(k_m)) v_m /
    max(sum_m phi(q) . phi(k_m), eps) over the kept phi(k_m), v_m. `fold` adds one source
    position to a memory (the order the engine builds it in). phi, q and k are those of the
    type's self attention (rfa: l2-normalised q and k; t2r, elu: q scaled by 1/sqrt(dh)), with
    its tensors under the same names (`cross.rfa.*`, `cross.t2r.*`). No gate: gates are causal.
    """

    def __init__(self, d_model, n_heads, kind, eps, features=None, kernel=None):
        super().__init__(d_model, n_heads)
        self.kind, self.eps = kind, eps
        if kind == "rfa":
            self.rfa = RandomFeatureMap(n_heads, features, self.head_dim, kernel)
        elif kind == "t2r":
            self.t2r = HeadLinear(n_heads, features, self.head_dim)
        elif kind != "elu":
            raise ValueError(f"no feature map for {kind!r}")

    def features(self, x):
        """phi over [B, H, T, dh] -> [B, H, T, F]."""
        if self.kind == "rfa":
            return self.rfa(x)
        if self.kind == "t2r":
            return torch.relu(self.t2r(x))
        return F.elu(x) + 1

    def _query(self, x):
        if self.kind == "rfa":
            return F.normalize(self._heads(self.q(x)), dim=-1, eps=1e-12)
        return super()._query(x)

    def _key(self, enc_out):
        k = self._heads(self.k(enc_out))
        return F.normalize(k, dim=-1, eps=1e-12) if self.kind == "rfa" else k

    def memory(self, enc_out):
        fk, v = self.features(self._key(enc_out)), self._heads(self.v(enc_out))
        return {"S": fk.transpose(-1, -2) @ v, "z": fk.sum(dim=2), "phi_k": fk, "v": v}

    def feature_count(self):
        if self.kind == "rfa":
            d = self.rfa.proj.shape[1]
            return 2 * d if self.rfa.kernel == "gaussian" else d
        return self.t2r.weight.shape[1] if self.kind == "t2r" else self.head_dim

    def init_memory(self, batch):
        """The empty memory (no source position folded in yet)."""
        f = self.feature_count()
        return {"S": self._state_zeros(batch, self.n_heads, f, self.head_dim), "z": self._state_zeros(batch, self.n_heads, f)}

    def fold(self, memory, enc_t):
        """memory + one source position enc_t [B, d]: S += phi(k) (x) v, z += phi(k)."""
        fk = self.features(self._key(enc_t[:, None]))[:, :, 0]  # [B, H, F]
        v = self._heads(self.v(enc_t[:, None]))[:, :, 0]  # [B, H, dh]
        return {"S": memory["S"] + fk[..., None] * v[:, :, None, :], "z": memory["z"] + fk}

    def attend(self, q, memory):
        """Parallel form over the source positions (needs memory's phi_k and v)."""
        scores = self.features(q) @ memory["phi_k"].transpose(-1, -2)  # [B, H, T, M]
        return (scores @ memory["v"]) / scores.sum(-1, keepdim=True).clamp_min(self.eps)

    def read(self, q, memory):
        """Recurrent form: q [B, H, T, dh] against (S, z) only."""
        fq = self.features(q)
        denominator = (fq * memory["z"][:, :, None, :]).sum(-1, keepdim=True)
        return (fq @ memory["S"]) / denominator.clamp_min(self.eps)

    def step(self, x_t, memory):
        return self._output(self.read(self._query(x_t[:, None, :]), memory))[:, 0]


def make_cross_attention(spec, d_model, n_heads, layer_id=CROSS_LAYER_ID, linformer=None):
    """Build the cross attention module of an AttentionSpec (layer_id: abc `random` slot hash;
    linformer: the decoder's cross_linformer table, for control position)."""
    if spec.type == "softmax":
        return SoftmaxCrossAttention(d_model, n_heads)
    if spec.type == "abc":
        return ABCCrossAttention(d_model, n_heads, spec.slots, spec.control, spec.seed, spec.reduce, layer_id, linformer)
    if spec.type in ("rfa", "t2r", "elu"):
        if spec.gate:
            raise ValueError("gated rfa has no cross attention form (gates are causal)")
        return LinearCrossAttention(d_model, n_heads, spec.type, spec.eps, spec.features, spec.kernel)
    raise ValueError(f"attention type {spec.type!r} cannot be used for cross attention")
