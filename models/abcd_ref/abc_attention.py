"""ABC: attention with bounded-memory control (Peng et al. 2022) with every control of models/FORMAT.md,
and the kernels the ABC cross attention shares (cross_attention.py)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention_base import SelfAttention, _causal_mask
from .config import ABC_LEARNED_CONTROLS


_NEG_INF = float("-inf")
_MASK64 = (1 << 64) - 1

# Layer ids mixed into the `random` control's slot hash (FORMAT.md): decoder self attention of
# decoder layer i uses i, encoder self attention of encoder layer i uses ENCODER_LAYER_ID + i,
# cross attention of decoder layer i uses CROSS_LAYER_ID + i.
ENCODER_LAYER_ID = 1 << 12
CROSS_LAYER_ID = 1 << 13


def splitmix64(x):
    """splitmix64 finaliser of the 64-bit integer x (Python int in [0, 2^64))."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def random_slots(seed, layer, n_heads, start, length, slots):
    """Slot i_t of each head and position t in [start, start + length): LongTensor [H, length].

    i_t = splitmix64(seed ^ (layer << 48) ^ (head << 40) ^ t) mod slots (FORMAT.md, abc `random`).
    """
    rows = []
    for head in range(n_heads):
        base = (seed ^ (layer << 48) ^ (head << 40)) & _MASK64
        rows.append([splitmix64(base ^ t) % slots for t in range(start, start + length)])
    return torch.tensor(rows, dtype=torch.long)


def log_control(a, control):
    """Per-slot log-control a' of control logits a (-inf: the token does not write the slot).

    exp: a' = a; sigmoid: a' = logsigmoid(a) (never log(sigmoid(a)), which is -inf below about
    -104 in fp32); relu: a' = log(a) where a > 0, else -inf.
    """
    if control == "exp":
        return a
    if control == "sigmoid":
        return F.logsigmoid(a)
    if control == "relu":
        return torch.where(a > 0, torch.log(a.clamp_min(torch.finfo(a.dtype).tiny)), _NEG_INF)
    raise ValueError(f"control {control!r} has no logits")


def abc_update(state, a, k, v):
    """One causal ABC update (the "mean" kernel). a: [B, H, n] log-control; k, v: [B, H, dh].

    Per slot j with a_j > -inf: L' = logaddexp(L, a_j); w = exp(a_j - L'); K~_j += w (k - K~_j);
    V~_j += w (v - V~_j). K~_j, V~_j stay the softmax_i(a_ij)-weighted averages of k_i, v_i.
    A slot with a_j = -inf is not written (the guard never evaluates (-inf) - (-inf)).
    """
    live = a > _NEG_INF
    log_norm = torch.logaddexp(state["L"], a)
    safe_a = torch.where(live, a, 0.0)
    safe_norm = torch.where(live, log_norm, 0.0)
    w = torch.where(live, torch.exp(safe_a - safe_norm), 0.0)[..., None]
    keys = state["K"] + w * (k[:, :, None, :] - state["K"])
    values = state["V"] + w * (v[:, :, None, :] - state["V"])
    return {"L": torch.where(live, log_norm, state["L"]), "K": keys, "V": values}


def abc_read(q, keys, values, live=None):
    """out = sum_{j live} softmax_j(K~_j . q) V~_j. q: [..., dh]; keys, values: [..., n, dh].

    live: optional bool [..., n] (False = a slot nothing was written to: masked); a query with
    no live slot reads 0.
    """
    scores = (keys * q[..., None, :]).sum(-1)
    if live is None:
        return (torch.softmax(scores, dim=-1)[..., None] * values).sum(-2)
    none_live = ~live.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~live, _NEG_INF).masked_fill(none_live, 0.0)
    probs = torch.softmax(scores, dim=-1).masked_fill(none_live, 0.0)
    return (probs[..., None] * values).sum(-2)


def _guarded_softmax(logits, dim):
    """softmax over `dim` that is 0 (not NaN) where every logit is -inf; also returns live."""
    dead = (logits == _NEG_INF).all(dim=dim, keepdim=True)
    weights = torch.softmax(logits.masked_fill(dead, 0.0), dim=dim).masked_fill(dead, 0.0)
    return weights, ~dead.squeeze(dim)


def abc_causal_chunked(q, k, v, a, chunk):
    """Causal ABC output [B, H, T, dh], equal to the masked T x T form, in matrix products only.

    q, k, v: [B, H, T, dh]; a: [B, H, T, n] log-control (-inf = no write). The sequence is cut into
    chunks of `chunk` tokens and the state after the previous chunks (log normaliser L, slot
    averages K~, V~: [B, H, n(, dh)]) is carried from chunk to chunk, as abc_update does a token at
    a time. Inside a chunk every exponential is taken relative to one stabiliser per slot,
    m = max(L_prev, max_i a_i) (0 where that is -inf: the slot is still dead), so with
    e_i = exp(a_i - m), c = exp(L_prev - m) and Z_t = c + sum_{i <= t} e_i (the running normaliser):
      K~_t . q_t = (c (K~_prev . q_t) + sum_{i <= t} e_i (q_t . k_i)) / Z_t
      out_t = sum_j p_tj / Z_tj (c_j V~_prev,j + sum_{i <= t} e_ij v_i),  p_t = softmax_j(K~_tj . q_t)
    over the slots live at t (written by some token i <= t); no live slot reads 0.
    Cost O(T * chunk * (n + dh)) per head instead of O(T^2 n dh). The only approximation is fp32
    underflow: if every a_i (i <= t) of a chunk lay more than ~80 below the chunk's maximum, Z_t would
    underflow (clamped at 1e-30); with control logits of trained models this does not happen.
    """
    b, h, t, dh = k.shape
    n = a.shape[-1]
    log_norm = torch.full((b, h, 1, n), _NEG_INF, dtype=a.dtype, device=a.device)
    keys = torch.zeros(b, h, n, dh, dtype=k.dtype, device=k.device)
    values = torch.zeros_like(keys)
    outs = []
    for start in range(0, t, chunk):
        end = min(start + chunk, t)
        ac, qc, kc, vc = a[:, :, start:end], q[:, :, start:end], k[:, :, start:end], v[:, :, start:end]
        mask = _causal_mask(end - start, a.device)
        m = torch.maximum(log_norm, ac.max(dim=2, keepdim=True).values)  # [B, H, 1, n]
        dead = m == _NEG_INF  # no write to the slot up to the chunk's end
        m_safe = m.masked_fill(dead, 0.0)
        e = torch.exp(ac - m_safe)  # [B, H, C, n]
        c = torch.exp(log_norm - m_safe)  # [B, H, 1, n]; 0 in the first chunk
        z = (c + torch.cumsum(e, dim=2)).clamp_min(1e-30)  # Z_t
        qk = (qc @ kc.transpose(-1, -2)).masked_fill(~mask, 0.0)  # [B, H, C, C]
        scores = (c * (qc @ keys.transpose(-1, -2)) + qk @ e) / z
        if dead.any() or bool((ac == _NEG_INF).any()):
            live = torch.maximum(log_norm, torch.cummax(ac, dim=2).values) > _NEG_INF  # [B, H, C, n]
            none_live = ~live.any(dim=-1, keepdim=True)
            scores = scores.masked_fill(~live, _NEG_INF).masked_fill(none_live, 0.0)
            pz = torch.softmax(scores, dim=-1).masked_fill(none_live, 0.0) / z
        else:
            pz = torch.softmax(scores, dim=-1) / z  # p_t / Z_t
        mixed = (pz @ e.transpose(-1, -2)).masked_fill(~mask, 0.0)  # [B, H, C(query), C(key)]
        outs.append((pz * c) @ values + mixed @ vc)
        z_last = z[:, :, -1:]  # [B, H, 1, n]
        keys = ((c * keys.transpose(-1, -2) + kc.transpose(-1, -2) @ e) / z_last).transpose(-1, -2)
        values = ((c * values.transpose(-1, -2) + vc.transpose(-1, -2) @ e) / z_last).transpose(-1, -2)
        log_norm = torch.where(dead, _NEG_INF, m_safe + torch.log(z_last))
    return torch.cat(outs, dim=2)


def abc_sum_parallel(q, k, v, phi, causal):
    """The "sum" kernel (abc `random` with reduce "sum") over a whole sequence.

    phi: [B, H, T, n] write weights (one-hot rows). K~_t = sum_{i <= t} phi_i (x) k_i (all i when
    not causal), likewise V~; out_t = sum_j softmax_j(K~_tj . q_t) V~_tj over all n slots (an
    unwritten slot is a zero row: logit 0, seed-literal). Computed without materialising K~_t:
    K~_t . q_t = (mask * q k^T) @ phi and out_t = ((p_t @ phi^T) * mask) @ v. Cost O(T^2 (n + dh)).
    """
    qk = q @ k.transpose(-1, -2)  # [B, H, T, T]
    if causal:
        mask = _causal_mask(q.shape[2], q.device)
        qk = qk.masked_fill(~mask, 0.0)
    probs = torch.softmax(qk @ phi, dim=-1)  # [B, H, T, n]
    mixed = probs @ phi.transpose(-1, -2)  # [B, H, T(query), T(key)]
    if causal:
        mixed = mixed.masked_fill(~mask, 0.0)
    return mixed @ v


@torch.no_grad()
def cluster_ids(k, slots):
    """Online (MacQueen) k-means slot of every key: LongTensor [B, H, T] (FORMAT.md, abc `cluster`).

    Token t goes to the lowest empty slot while one exists, else to argmin_j ||k_t - K~_j||^2 (ties:
    lowest j); K~_j is the running mean of the keys assigned so far. No gradient (a scan for ids).
    """
    b, h, t, dh = k.shape
    centroids = torch.zeros(b, h, slots, dh, dtype=k.dtype, device=k.device)
    counts = torch.zeros(b, h, slots, dtype=k.dtype, device=k.device)
    ids = []
    for i in range(t):
        pick = _cluster_pick(centroids, counts == 0, k[:, :, i])
        ids.append(pick)
        one_hot = F.one_hot(pick, slots).to(k.dtype)  # [B, H, n]
        counts = counts + one_hot
        w = (one_hot / counts.clamp_min(1))[..., None]
        centroids = centroids + w * (k[:, :, i, None, :] - centroids)
    return torch.stack(ids, dim=2)


def _cluster_pick(centroids, empty, k):
    """Slot [B, H] for key k [B, H, dh]: the lowest empty slot, else the nearest centroid."""
    dist = ((k[:, :, None, :] - centroids) ** 2).sum(-1)  # [B, H, n]
    nearest = torch.argmin(dist, dim=-1)  # first minimum: ties go to the lowest j
    first_empty = torch.argmax(empty.to(torch.int8), dim=-1)
    return torch.where(empty.any(dim=-1), first_empty, nearest)


@torch.no_grad()
def cluster_step_ids(state, k):
    """cluster_ids for one recurrent step from the mean-kernel state (empty = L still -inf)."""
    return _cluster_pick(state["K"], state["L"] == _NEG_INF, k)


def block_log_control(t, slots, block, device):
    """a' [T(query), T(key), n] of control block: 0 where key i (<= query t) lies in the block that
    ring slot j holds at t, -inf elsewhere. Block b = floor(i / c) lives in slot b mod n until block
    b + n evicts it, so at query t slot j holds b_j = b_t - ((b_t - j) mod n) when that is >= 0."""
    pos = torch.arange(t, device=device)
    b_query = (pos // block)[:, None]  # [T, 1]
    j = torch.arange(slots, device=device)[None, :]  # [1, n]
    held = b_query - torch.remainder(b_query - j, slots)  # [T(query), n]
    in_block = (pos // block)[None, :, None] == held[:, None, :]  # [T, T, n]
    causal = (pos[None, :] <= pos[:, None])[:, :, None]
    return torch.zeros(t, t, slots, device=device).masked_fill(~(in_block & causal), _NEG_INF)


class _AbcControl:
    """The control of an abc module: log-control a' per slot, or the `random` one-hot writes.

    Mixed into ABCAttention and ABCCrossAttention; needs n_heads, slots, control_kind, seed,
    reduce, layer_id and a `_control_logits(x)` giving the learned control logits [B, H, T, n]
    (`control` itself is the learned projection, None for random).
    """

    def _random_log_control(self, x, start):
        """a' [B, H, T, n]: 0 at slot i_t, -inf elsewhere (positions start..start+T-1)."""
        slots = random_slots(self.seed, self.layer_id, self.n_heads, start, x.shape[1], self.slots).to(x.device)
        one_hot = F.one_hot(slots, self.slots).to(x.dtype)  # [H, T, n]
        log_c = torch.log(one_hot)  # 0 / -inf
        return log_c[None].expand(x.shape[0], -1, -1, -1)

    def _log_control(self, x, start=0, k=None, state=None):
        """x [B, T, d] at positions start.. -> a' [B, H, T, n].

        cluster needs the keys k [B, H, T, dh] and, for one recurrent step, the state.
        """
        if self.control_kind == "random":
            return self._random_log_control(x, start)
        if self.control_kind == "cluster":
            ids = cluster_step_ids(state, k[:, :, 0])[..., None] if state is not None else cluster_ids(k, self.slots)
            return torch.log(F.one_hot(ids, self.slots).to(k.dtype))
        return log_control(self._control_logits(x), self.control_kind)

    def _position_phi(self, start, length, like):
        """phi [1, H, T, n] of control position: columns start.. of the linformer table."""
        table = self.linformer.weight  # [n, N]
        if start + length > table.shape[1]:
            raise ValueError(f"position {start + length - 1} is beyond max_positions {table.shape[1]}")
        return table[:, start:start + length].t().to(like)[None, None].expand(-1, self.n_heads, -1, -1)

    @property
    def sums(self):
        """Plain-sum slots (no L): random with reduce sum, position (signed phi), block (ring)."""
        return (self.control_kind == "random" and self.reduce == "sum") or self.control_kind in ("position", "block")

    @property
    def counts_positions(self):
        return self.control_kind in ("random", "position", "block")


class ABCAttention(_AbcControl, SelfAttention):
    """ABC: n slots per head, each a control-weighted running average of keys and values.

    `control` picks the per-slot log-control (exp, sigmoid, relu: from a learned projection;
    random: one slot per token from a hash of (seed, layer_id, head, position), no projection).
    reduce "sum" keeps slot sums instead of means (no L in the state).
    With `shared_control` the control projection belongs to the stack; this module only holds a
    reference to it (so it is saved once, as `{decoder,encoder}.shared_control`).
    """

    def __init__(self, d_model, n_heads, slots, causal=True, shared_control=None, control="exp", seed=None, reduce=None, layer_id=0, linformer=None, block=None):
        super().__init__(d_model, n_heads, causal)
        self.slots = slots
        self.control_kind = control
        self.seed, self.reduce, self.layer_id = seed, reduce or "mean", layer_id
        self.block = block
        learned = control in ABC_LEARNED_CONTROLS
        self.control = nn.Linear(d_model, n_heads * slots) if learned and shared_control is None else None
        object.__setattr__(self, "shared_control", shared_control)  # not registered: owned by the stack
        object.__setattr__(self, "linformer", linformer)  # position: the stack's [n, N] table

    def _control_logits(self, x):
        """[B, T, d] -> control logits a [B, H, T, n]."""
        control = self.control if self.control is not None else self.shared_control
        return self._heads(control(x), self.slots)

    # Chunk length of the causal training path (abc_causal_chunked); None = the masked T x T form.
    chunk = None

    def parallel(self, x):
        q, k, v = self._query(x), self._heads(self.k(x)), self._heads(self.v(x))
        t = x.shape[1]
        if self.control_kind == "position":
            return abc_sum_parallel(q, k, v, self._position_phi(0, t, q).expand(x.shape[0], -1, -1, -1), self.causal)
        if self.control_kind == "block":
            # The ring of block means: per query position, a mean over the tokens of the block each
            # slot holds (the open block included); slots holding no block yet are masked.
            logits = block_log_control(t, self.slots, self.block, x.device).to(q.dtype)
            weights, live = _guarded_softmax(logits[None, None].expand(x.shape[0], self.n_heads, -1, -1, -1), dim=3)
            keys = torch.einsum("bhtin,bhid->bhtnd", weights, k)
            values = torch.einsum("bhtin,bhid->bhtnd", weights, v)
            return abc_read(q, keys, values, live)
        a = self._log_control(x, 0, k)
        if self.sums:
            return abc_sum_parallel(q, k, v, torch.exp(a), self.causal)
        if self.causal and self.chunk:
            return abc_causal_chunked(q, k, v, a, self.chunk)
        if self.causal:
            # W[t, i, j] = softmax over i <= t of a[i, j]: a masked softmax per query position.
            mask = _causal_mask(t, x.device)[:, :, None]
            logits = a[:, :, None, :, :].expand(-1, -1, t, -1, -1).masked_fill(~mask, _NEG_INF)
            weights, live = _guarded_softmax(logits, dim=3)  # [B, H, T(query), T(key), n]
            keys = torch.einsum("bhtin,bhid->bhtnd", weights, k)
            values = torch.einsum("bhtin,bhid->bhtnd", weights, v)
        else:
            weights, live = _guarded_softmax(a, dim=2)  # [B, H, T(key), n]
            keys = torch.einsum("bhin,bhid->bhnd", weights, k)[:, :, None]
            values = torch.einsum("bhin,bhid->bhnd", weights, v)[:, :, None]
            live = live[:, :, None]
        return abc_read(q, keys, values, live)

    def init_state(self, batch):
        h, n, dh = self.n_heads, self.slots, self.head_dim
        state = {"K": self._state_zeros(batch, h, n, dh), "V": self._state_zeros(batch, h, n, dh)}
        if not self.sums:
            state["L"] = torch.full((batch, h, n), _NEG_INF, dtype=self.q.weight.dtype, device=self.q.weight.device)
        if self.counts_positions:
            state["t"] = 0  # position of the next token (slot hash, linformer column, block ring)
        return state

    def update(self, state, x_t):
        start = state.get("t", 0)
        k, v = self._heads(self.k(x_t))[:, :, 0], self._heads(self.v(x_t))[:, :, 0]
        if self.control_kind == "block":
            # Ring slot s = b mod n of block b = floor(t / c) holds the running mean of its r tokens;
            # the first token of a block overwrites the slot (evicting block b - n).
            slot, fill = (start // self.block) % self.slots, start % self.block + 1
            keys, values = state["K"].clone(), state["V"].clone()
            keys[:, :, slot] = keys[:, :, slot] + (k - keys[:, :, slot]) / fill if fill > 1 else k
            values[:, :, slot] = values[:, :, slot] + (v - values[:, :, slot]) / fill if fill > 1 else v
            return {"K": keys, "V": values, "t": start + 1}
        if self.control_kind == "position":
            phi = self._position_phi(start, 1, k)[:, :, 0, :, None]  # [1, H, n, 1]
            return {"K": state["K"] + phi * k[:, :, None, :], "V": state["V"] + phi * v[:, :, None, :], "t": start + 1}
        a = self._log_control(x_t, start, k[:, :, None], state if self.control_kind == "cluster" else None)[:, :, 0]
        if self.sums:
            phi = torch.exp(a)[..., None]
            new = {"K": state["K"] + phi * k[:, :, None, :], "V": state["V"] + phi * v[:, :, None, :]}
        else:
            new = abc_update(state, a, k, v)
        if "t" in state:
            new["t"] = start + 1
        return new

    def read(self, state, x_t):
        if self.control_kind == "block":
            # Slots 0..b hold blocks until the ring is full (b = block of the last token).
            b = (state["t"] - 1) // self.block
            live = torch.arange(self.slots, device=state["K"].device) <= b
            live = live[None, None, None].expand(state["K"].shape[0], self.n_heads, 1, -1)
        else:
            live = None if self.sums else (state["L"] > _NEG_INF)[:, :, None]
        return abc_read(self._query(x_t), state["K"][:, :, None], state["V"][:, :, None], live)
