"""Softmax layers inside constant-state models, and abcd's mixers inside HF Llama (issue 29).

- `FlaAttention`: the softmax attention layer of fla hybrids (`fla/layers/attn.py`; config key `attn`,
  the listed layers): q/k/v (bias if `qkv_bias`) and o (no bias) projections `attn.{q,k,v,o}_proj`,
  head_dim = hidden_size / attn.num_heads, half-split RoPE over head_dim with base attn.rope_theta at
  the absolute position, scale 1/sqrt(head_dim), GQA; the same block (attn_norm, mlp_norm, mlp) as
  the recurrent layers. State: the KV cache (k, v [B, t, Hkv, hd]).
- `AbcdLlamaForCausalLM` (model_type `abcd_llama`): HF Llama whose `abcd_layers` name each layer's
  attention: softmax (Llama's, with RoPE), or abcd's t2r / abc (exp control) applied to the Llama
  q/k/v/o projections WITHOUT RoPE, with exactly the math of models/abcd_ref/abc_attention.py and
  linear_attention.py (the modules are reused: q scaled by 1/sqrt(head_dim) before the feature map / slot read). Extra
  tensors `self_attn.t2r.{weight [H, r, hd], bias [H, r]}` and `self_attn.control.{weight [H n, d],
  bias [H n]}`. models/FORMAT.md ("abcd_llama").
Not thread-safe (plain torch modules).
"""

import torch
from torch import nn

from ..abc_attention import ABCAttention
from ..linear_attention import T2RAttention
from .llama import LlamaAttention, LlamaForCausalLM
from .skeleton import rope_inv_freq


class FlaAttention(LlamaAttention):
    """fla softmax attention layer of a hybrid (a = the resolved `attn` namespace of config.resolve)."""

    def __init__(self, a):
        super().__init__(a)
        self.o_proj = nn.Linear(a.num_heads * a.head_dim, a.hidden_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(a.head_dim, a.rope_theta), persistent=False)

    def init_state(self, batch, dtype):
        empty = torch.zeros(batch, 0, self.c.num_kv_heads, self.c.head_dim, dtype=dtype)
        return {"k": empty, "v": empty}

    def step(self, u, state, position=None, **unused):
        q, k, v = self.project(u[:, None], torch.tensor([position]), self.inv_freq)
        k, v = torch.cat([state["k"], k], 1), torch.cat([state["v"], v], 1)
        return self.attend(q, k, v, causal_offset=k.shape[1] - 1)[:, 0], {"k": k, "v": v}

    def forward(self, u, **unused):
        q, k, v = self.project(u, torch.arange(u.shape[1]), self.inv_freq)
        return self.attend(q, k, v, causal_offset=0)


class AbcdMixer(nn.Module):
    """A t2r or abc layer on Llama projections. The abcd module (`inner`, not registered) computes;
    this module registers the same Linear objects under the HF names, plus `t2r` or `control`."""

    def __init__(self, c, spec):
        super().__init__()
        d = c.hidden_size
        if spec.type == "t2r":
            inner = T2RAttention(d, c.num_heads, spec.features, spec.eps)
            self.t2r = inner.t2r
        else:
            inner = ABCAttention(d, c.num_heads, spec.slots, control="exp")
            self.control = inner.control
        for hf_name, name in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("o_proj", "o")):
            linear = nn.Linear(d, d, bias=c.attention_bias)
            setattr(inner, name, linear)
            setattr(self, hf_name, linear)
        object.__setattr__(self, "inner", inner)

    def forward(self, h):
        return self.inner(h)


class AbcdLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, c):
        super().__init__(c)
        for layer, spec in zip(self.model.layers, c.abcd_layers):
            if spec.type != "softmax":
                layer.self_attn = AbcdMixer(c, spec)

    def _layer(self, layer, h, positions, cache):
        """Attention output of one layer for h [B, T, d] and its new cache / state."""
        attn = layer.self_attn
        if isinstance(attn, AbcdMixer):
            if cache is None:
                return attn(h), None
            out, state = attn.inner.step(h[:, 0], cache)
            return out[:, None], state
        q, k, v = attn.project(h, positions, self.inv_freq)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 1), torch.cat([cache[1], v], 1)
        return attn.attend(q, k, v, causal_offset=k.shape[1] - q.shape[1]), (k, v)

    def _run(self, tokens, positions, cache):
        """Parallel form (cache None, from the start) or one step (tokens [B, 1]) after `cache`."""
        x = self.model.embed_tokens(tokens)
        new_cache = []
        for i, layer in enumerate(self.model.layers):
            out, layer_cache = self._layer(layer, layer.input_layernorm(x), positions, None if cache is None else cache[i])
            x = x + out
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            new_cache.append(layer_cache)
        return self.lm_head(self.model.norm(x)), new_cache

    def init_state(self, batch):
        c, dtype = self.config, self.lm_head.weight.dtype
        empty = torch.zeros(batch, 0, c.num_kv_heads, c.head_dim, dtype=dtype)
        layers = [layer.self_attn.inner.init_state(batch) if isinstance(layer.self_attn, AbcdMixer) else (empty, empty) for layer in self.model.layers]
        return {"position": 0, "layers": layers}
