"""Time the PyTorch reference's recurrent decode on an exported model directory.

abcd-bench reference runs this script between its own timed passes on the same checkpoint and
the same token ids, so both numbers come from one run on one machine:

  /usr/bin/python3 loadtest/bench_reference.py --model DIR --tokens TOKENS.json \
      [--threads 1] [--repeats 3] [--device cpu|cuda] [--dtype float32|bfloat16]

TOKENS.json: {"batches": {"1": [[t0, t1, ...]], "32": [[...], ... 32 rows]}}; every row has the
same length T. For each batch the script feeds token column t to DecoderLM.step (the recurrent
form: the state of every layer is carried from step to step, as a decoding server would) for
t = 0..T-1 from an empty state, `repeats` times, and prints one JSON object on stdout:

  {"torch": VERSION, "threads": N, "results": [{"batch": B, "steps": T,
    "step_ms": [mean step time of each pass], "argmax": [argmax of row 0, every step],
    "last_logits": [row 0 logits after the last step]}]}
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
from abcd_ref import load  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model directory (config.json + model.safetensors)")
    parser.add_argument("--tokens", required=True, help="JSON file with the token ids per batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per batch size")
    parser.add_argument("--device", default="cpu", help="torch device (cuda: eager PyTorch on the GPU)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="weights and activations")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
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
            results.append({"batch": batch, "steps": steps, "step_ms": step_ms, "argmax": argmax, "last_logits": last})
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "device": str(device), "results": results}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
