"""Time the PyTorch reference's recurrent decode on an exported model directory.

abcd-bench reference runs this script between its own timed passes on the same checkpoint and
the same token ids, so both numbers come from one run on one machine:

  /usr/bin/python3 loadtest/bench_reference.py --model DIR --tokens TOKENS.json \
      [--threads 1] [--repeats 3] [--device cpu|cuda] [--dtype float32|bfloat16] [--cuda-graphs]

TOKENS.json: {"batches": {"1": [[t0, t1, ...]], "32": [[...], ... 32 rows]}}; every row has the
same length T. For each batch the script feeds token column t to DecoderLM.step (the recurrent
form: the state of every layer is carried from step to step, as a decoding server would) for
t = 0..T-1 from an empty state, `repeats` times, and prints one JSON object on stdout:

  {"torch": VERSION, "threads": N, "results": [{"batch": B, "steps": T,
    "step_ms": [mean step time of each pass], "argmax": [argmax of row 0, every step],
    "last_logits": [row 0 logits after the last step],
    "graph_step_ms": [...] or null, "graph_argmax": [...], "graph_note": why null}]}

With --cuda-graphs (CUDA only) every batch is also decoded by replaying one captured CUDA graph
of a step (StaticDecoder: fixed input, position and state tensors, the state updated in place),
which is what PyTorch can do for models whose state keeps its shape; softmax's KV cache grows
every step, so its graph_step_ms is null with the reason in graph_note.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
from abcd_ref import load  # noqa: E402
from abcd_ref.model import sinusoidal_positions  # noqa: E402


def _tensors(tree):
    """The tensors of a state (nested lists and dicts), in a fixed order."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for key in sorted(tree) for t in _tensors(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


class StaticDecoder:
    """DecoderLM.step over fixed tensors, so that a step can be captured as a CUDA graph.

    The token ids go in `ids`, the position is a device counter indexing a precomputed table of
    the same sinusoidal positions DecoderLM._embed adds, and each step copies the new state over
    the old one in place. step() raises ValueError when a layer's state changes shape (a growing
    KV cache), which no captured graph can follow.
    """

    def __init__(self, model, batch, max_steps):
        weight = model.embed.weight
        self.model = model
        self.ids = torch.zeros(batch, dtype=torch.long, device=weight.device)
        self.position = torch.zeros(1, dtype=torch.long, device=weight.device)
        self.positions = sinusoidal_positions(0, max_steps, model.config.d_model).to(weight)
        self.layers = model.decoder.init_state(batch)
        self.initial = [t.clone() for t in _tensors(self.layers)]

    def reset(self):
        for state, initial in zip(_tensors(self.layers), self.initial):
            state.copy_(initial)
        self.position.zero_()

    def step(self):
        model = self.model
        x = model.embed(self.ids[:, None])
        if model.config.scale_embeddings:
            x = x * math.sqrt(model.config.d_model)
        x = x + self.positions.index_select(0, self.position)
        h, layers = model.decoder.step(x[:, 0], self.layers)
        old, new = _tensors(self.layers), _tensors(layers)
        if len(old) != len(new) or any(a.shape != b.shape for a, b in zip(old, new)):
            raise ValueError("the state changes shape from step to step (a growing KV cache)")
        new = [b.clone() if b.data_ptr() == a.data_ptr() else b for a, b in zip(old, new)]
        for a, b in zip(old, new):
            a.copy_(b)
        self.position.add_(1)
        return model._logits(h)


def time_graph(model, ids, repeats):
    """CUDA-graph replay of a StaticDecoder step over ids [B, T]: (step_ms per pass, argmax of
    row 0 every step of the first pass), or a ValueError naming why no graph can be captured."""
    batch, steps = ids.shape
    warmup = 3
    decoder = StaticDecoder(model, batch, max(steps, warmup))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the graph, as torch.cuda.graph asks
        for _ in range(warmup):
            decoder.ids.copy_(ids[:, 0])
            decoder.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = decoder.step()
    step_ms, argmax = [], []
    for repeat in range(repeats):
        decoder.reset()
        picks = []
        start = time.perf_counter()
        for t in range(steps):
            decoder.ids.copy_(ids[:, t])
            graph.replay()
            picks.append(int(logits[0].argmax()))  # the host needs the token: syncs the GPU
        step_ms.append((time.perf_counter() - start) / steps * 1000)
        if repeat == 0:
            argmax = picks
    return step_ms, argmax


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model directory (config.json + model.safetensors)")
    parser.add_argument("--tokens", required=True, help="JSON file with the token ids per batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per batch size")
    parser.add_argument("--device", default="cpu", help="torch device (cuda: eager PyTorch on the GPU)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="weights and activations")
    parser.add_argument("--cuda-graphs", action="store_true", help="also time CUDA-graph replay of a step (CUDA only)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.cuda_graphs and device.type != "cuda":
        sys.exit("bench_reference.py: --cuda-graphs needs --device cuda")
    model = load(args.model).eval().to(device=device, dtype=getattr(torch, args.dtype))
    if model.config.is_encoder_decoder:
        sys.exit("bench_reference.py: decoder-only models only")
    with open(args.tokens, encoding="utf-8") as f:
        batches = json.load(f)["batches"]

    results = []
    with torch.inference_mode():
        for key in sorted(batches, key=int):
            ids = torch.tensor(batches[key], dtype=torch.long, device=device)  # [B, T]
            batch, steps = ids.shape
            step_ms, argmax, last = [], [], None
            for repeat in range(args.repeats):
                state = model.init_state(batch)
                picks = []
                start = time.perf_counter()
                for t in range(steps):
                    logits, state = model.step(ids[:, t], state)
                    picks.append(int(logits[0].argmax()))  # the host needs the token: syncs the GPU
                step_ms.append((time.perf_counter() - start) / steps * 1000)
                if repeat == 0:
                    argmax, last = picks, logits[0].float().tolist()
            result = {"batch": batch, "steps": steps, "step_ms": step_ms, "argmax": argmax, "last_logits": last}
            if args.cuda_graphs:
                try:
                    result["graph_step_ms"], result["graph_argmax"] = time_graph(model, ids, args.repeats)
                except ValueError as error:
                    result["graph_step_ms"], result["graph_note"] = None, str(error)
            results.append(result)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "device": str(device), "results": results}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
