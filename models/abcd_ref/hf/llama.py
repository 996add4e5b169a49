"""HF Llama (`LlamaForCausalLM`, model_type llama): pre-norm blocks of softmax attention with
half-split RoPE (linear / llama3 scaling, theta from `rope_parameters` or `rope_theta`), GQA, optional
attention and MLP biases, SwiGLU MLP, final RMSNorm, untied or tied head; no embedding scale.
The same class serves the model types built like it (written from transformers' modeling files):
Mistral and Qwen2/Qwen3 sliding windows (`layer_windows` of config.resolve: query t sees keys s with
t - s < window), Qwen2 (q/k/v biases, none on o_proj) and Qwen3 (`q_norm` / `k_norm`: RMSNorm over each head's head_dim values, rms_norm_eps, on q
and k before RoPE).

`step` appends to a KV cache (state: per layer k, v [B, t, Hkv, head_dim] and the position); `forward`
is the parallel causal form. Tensor names are the HF ones (`model.embed_tokens`, `model.layers.{i}.
input_layernorm`, `.self_attn.{q,k,v,o}_proj`, `.post_attention_layernorm`, `.mlp.*`, `model.norm`,
`lm_head`). Not thread-safe.
"""

import torch
from torch import nn

from .skeleton import GatedMLP, RMSNorm, apply_rope, compute_dtype, repeat_heads, rope_inv_freq


class LlamaAttention(nn.Module):
    def __init__(self, c, layer_idx=0):
        super().__init__()
        self.c = c
        windows = getattr(c, "layer_windows", None)
        self.window = windows[layer_idx] if windows else None
        d, hd = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(d, c.num_heads * hd, bias=c.attention_bias)
        self.k_proj = nn.Linear(d, c.num_kv_heads * hd, bias=c.attention_bias)
        self.v_proj = nn.Linear(d, c.num_kv_heads * hd, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.num_heads * hd, d, bias=getattr(c, "o_bias", c.attention_bias))
        if getattr(c, "qk_norm", False):
            self.q_norm = RMSNorm(hd, c.norm_eps)
            self.k_norm = RMSNorm(hd, c.norm_eps)

    def project(self, h, positions, inv_freq):
        """h [B, T, d] -> q [B, T, H, hd], k, v [B, T, Hkv, hd] with RoPE at `positions` [T]."""
        c = self.c
        b, t, _ = h.shape
        q = self.q_proj(h).view(b, t, c.num_heads, c.head_dim)
        k = self.k_proj(h).view(b, t, c.num_kv_heads, c.head_dim)
        v = self.v_proj(h).view(b, t, c.num_kv_heads, c.head_dim)
        if getattr(c, "qk_norm", False):
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq), v

    def attend(self, q, k, v, causal_offset):
        """q [B, T, H, hd] against k, v [B, S, Hkv, hd]; query t sees keys s <= t + causal_offset."""
        c = self.c
        k, v = repeat_heads(k, c.groups, 2), repeat_heads(v, c.groups, 2)
        scores = torch.einsum("bthd,bshd->bhts", q, k).to(compute_dtype(q.dtype)) / c.head_dim**0.5
        t, s = q.shape[1], k.shape[1]
        visible = torch.arange(s)[None, :] <= torch.arange(t)[:, None] + causal_offset
        if self.window is not None:  # the last `window` keys, the query's own included
            visible &= torch.arange(s)[None, :] > torch.arange(t)[:, None] + causal_offset - self.window
        scores = scores.masked_fill(~visible, -float("inf"))
        weights = scores.softmax(-1).to(q.dtype)
        out = torch.einsum("bhts,bshd->bthd", weights, v)
        return self.o_proj(out.reshape(*out.shape[:2], c.num_heads * c.head_dim))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c, layer_idx=0):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.self_attn = LlamaAttention(c, layer_idx)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(c, i) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # fp32 as transformers computes it; .double() widens it exactly.
        self.register_buffer("inv_freq", rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling), persistent=False)

    def _run(self, tokens, positions, cache):
        """tokens [B, T] at `positions`; cache: per layer (k, v) of earlier tokens or None. Returns logits, cache."""
        x = self.model.embed_tokens(tokens)
        new_cache = []
        for i, layer in enumerate(self.model.layers):
            q, k, v = layer.self_attn.project(layer.input_layernorm(x), positions, self.inv_freq)
            if cache is not None:
                k, v = torch.cat([cache[i][0], k], 1), torch.cat([cache[i][1], v], 1)
            x = x + layer.self_attn.attend(q, k, v, causal_offset=k.shape[1] - q.shape[1])
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            new_cache.append((k, v))
        return self.lm_head(self.model.norm(x)), new_cache

    def init_state(self, batch):
        c, dtype = self.config, self.lm_head.weight.dtype
        empty = torch.zeros(batch, 0, c.num_kv_heads, c.head_dim, dtype=dtype)
        return {"position": 0, "layers": [(empty, empty) for _ in range(c.num_layers)]}

    def step(self, tokens, state):
        position = state["position"]
        logits, cache = self._run(tokens[:, None], torch.tensor([position]), state["layers"])
        return logits[:, 0], {"position": position + 1, "layers": cache}

    def forward(self, tokens):
        return self._run(tokens, torch.arange(tokens.shape[1]), None)[0]
