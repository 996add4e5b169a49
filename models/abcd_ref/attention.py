"""Attention modules of models/FORMAT.md, each in a parallel and a recurrent form.

Self attention modules map a normalised layer input x [B, T, d] to o(attn(x)) [B, T, d]:
  forward(x)                 parallel (training) form over the whole sequence,
  init_state(batch)          empty decode state,
  step(x_t, state)           recurrent form for one token x_t [B, d] -> (out [B, d], state),
  forward_recurrent(x)       the recurrent form driven over a whole sequence (for parity checks).
A step first updates the state with the current token, then reads it with the current query.
Bidirectional (encoder) modules read every query against the state after the whole sequence.

Cross attention modules are in cross_attention.py; they share the kernels defined here.

Inside a module, per-head tensors are [B, H, T, ...]; a decode step uses T = 1.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ABC_LEARNED_CONTROLS


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


# --------------------------------------------------------------------------- softmax, window


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


# --------------------------------------------------------------------------------------- abc


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


# ---------------------------------------------------------------------------- linear attention


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


def make_self_attention(spec, d_model, n_heads, causal, shared_control=None, layer_id=0, linformer=None):
    """Build the self attention module of an AttentionSpec (layer_id: abc `random` slot hash)."""
    if spec.type == "softmax":
        return SoftmaxAttention(d_model, n_heads, causal)
    if spec.type == "window":
        return WindowAttention(d_model, n_heads, spec.window, spec.dilation)
    if spec.type == "abc":
        shared = shared_control if spec.shared_control else None
        return ABCAttention(d_model, n_heads, spec.slots, causal, shared, spec.control, spec.seed, spec.reduce, layer_id, linformer, spec.block)
    if spec.type == "rfa":
        return RFAAttention(d_model, n_heads, spec.features, spec.kernel, spec.gate, spec.eps, causal)
    if spec.type == "t2r":
        return T2RAttention(d_model, n_heads, spec.features, spec.eps, causal)
    if spec.type == "elu":
        return ELUAttention(d_model, n_heads, spec.eps, causal)
    if spec.type == "gmat":
        from .gmat import GmatAttention  # gmat.py builds on SoftmaxAttention

        return GmatAttention(d_model, n_heads, spec.chunk)
    raise ValueError(f"unknown attention type {spec.type!r}")


# ------------------------------------------------------------------------------------- cross
