"""fla's ShortConvolution (`use_short_conv: true`): a depthwise causal convolution of W = conv_size taps
over a projection's channels, per channel c

    y_c(t) = b_c + sum_{i=0}^{W-1} w[c, 0, i] x_c(t - (W - 1) + i),   then silu (or no activation)

with zeros before the first token (fla pads W - 1 on the left and keeps the first T outputs). Tensors
`<name>_conv1d.weight [C, 1, W]` and, where the layer was built with conv_bias, `<name>_conv1d.bias [C]`.
The recurrent state is the last W - 1 inputs [B, W - 1, C] (oldest first). GSA / GLA / Gated DeltaNet
convolve q, k, v with silu; HGRN2 q, f, i without activation.

`project(mixer, names, u, convs)` is how a mixer reads its projections: `getattr(mixer, name + "_proj")(u)`
through `name_conv1d` where the mixer has one. Not thread-safe (plain torch modules).
"""

import torch
import torch.nn.functional as F
from torch import nn


class ShortConvolution(nn.Module):
    def __init__(self, channels, size, bias=False, activation="silu"):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels, 1, size))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None
        self.size = size
        self.activation = activation

    def _act(self, y):
        return F.silu(y) if self.activation == "silu" else y

    def init_state(self, batch, dtype):
        return torch.zeros(batch, self.size - 1, self.weight.shape[0], dtype=dtype)

    def forward(self, x):
        """x [B, T, C] from a zero history -> [B, T, C] (the parallel form)."""
        t = x.shape[1]
        y = F.conv1d(x.transpose(1, 2), self.weight, self.bias, padding=self.size - 1, groups=x.shape[-1])
        return self._act(y[..., :t].transpose(1, 2))

    def step(self, x, cache):
        """x [B, C], cache [B, W - 1, C] -> (y [B, C], new cache)."""
        window = torch.cat([cache, x[:, None]], 1)  # [B, W, C], the current input last
        y = torch.einsum("bwc,cw->bc", window, self.weight[:, 0, :])
        if self.bias is not None:
            y = y + self.bias
        return self._act(y), window[:, 1:]


def add_short_convs(mixer, c, specs, activation):
    """Gives `mixer` a `<name>_conv1d` per (name, channels) of specs when the config has use_short_conv."""
    mixer.conv_names = [name for name, _ in specs] if c.use_short_conv else []
    for name, channels in specs if c.use_short_conv else ():
        setattr(mixer, f"{name}_conv1d", ShortConvolution(channels, c.conv_size, c.conv_bias, activation))


def project(mixer, names, u, convs=None):
    """The projections `names` of u, each through its short convolution where the mixer has one.

    u [B, T, d] (parallel: from a zero history, convs None) or [B, d] (one step: convs is the dict
    name -> cache of the mixer's state, replaced here by the new caches)."""
    out = []
    for name in names:
        x = getattr(mixer, f"{name}_proj")(u)
        if name in mixer.conv_names:
            conv = getattr(mixer, f"{name}_conv1d")
            if convs is None:
                x = conv(x)
            else:
                x, convs[name] = conv.step(x, convs[name])
        out.append(x)
    return out


def init_conv_state(mixer, batch, dtype):
    """{name: zero cache} of the mixer's convolutions (empty without short convolutions)."""
    return {name: getattr(mixer, f"{name}_conv1d").init_state(batch, dtype) for name in mixer.conv_names}
