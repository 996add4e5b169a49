"""Write a random checkpoint in the exact Hugging Face layout (config.json, safetensors, optional
tokenizer files) for the fla types gsa / gla / retnet / hgrn2, HF llama / mistral / qwen2 / qwen3 and
abcd_llama (models/README.md).

Usage (from the repository root):
  /usr/bin/python3 models/write_hf_checkpoint.py --type gsa --preset tiny --out /tmp/gsa
  /usr/bin/python3 models/write_hf_checkpoint.py --type llama --preset 1.3b --shards 3 \
      --tokenizer models/tokenizers/lm.model --out /tmp/llama-1.3b
Options: --dtype f32|bf16|f16 (default: f32 for tiny, bf16 for 1.3b), --shards N, --legacy [FEATURES]
(comma list of fused_mlp, norm_first, g_norm, embed_tokens; bare --legacy: the type's 2024 layout),
--tied, --num-kv-heads N, --seed S, --set key=value (JSON value; repeatable), --drop key (repeatable).
An fla hybrid: --set 'attn={"layers": [1], "num_heads": 4}'; abcd_llama: --set 'abcd_layers=[...]'.
Writing is streamed per tensor (the 1.3b preset takes a few minutes and ~1 GB of memory).
"""

import argparse
import json
import sys
import time

from abcd_ref.hf import DEFAULT_LEGACY, MODEL_TYPES, preset_config, resolve, state_bytes, write_checkpoint
from abcd_ref.hf.config import LLAMA_TYPES, PRESET_DTYPE, PRESETS, kv_bytes_per_token


def parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--type", required=True, choices=MODEL_TYPES)
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument("--dtype", choices=("f32", "bf16", "f16"))
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--legacy", nargs="?", const="default", help="comma list of legacy features, or none for the type's default")
    parser.add_argument("--tied", action="store_true", help="tie_word_embeddings: true (no lm_head tensor)")
    parser.add_argument("--num-kv-heads", type=int)
    parser.add_argument("--tokenizer", help="SentencePiece tokenizer.model to copy (sets vocab_size and special ids)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--drop", action="append", default=[], metavar="KEY", help="remove a key from config.json")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def config_from_args(args):
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--set expects key=value, got {item!r}")
        overrides[key] = parse_value(value)
    if args.tied:
        overrides["tie_word_embeddings"] = True
    if args.num_kv_heads is not None:
        overrides["num_key_value_heads" if args.type in LLAMA_TYPES + ("abcd_llama",) else "num_kv_heads"] = args.num_kv_heads
    config = preset_config(args.type, args.preset, **overrides)
    for key in args.drop:
        config.pop(key, None)
    return config


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.shards < 1:
        sys.exit("--shards must be >= 1")
    legacy = ()
    if args.legacy == "default":
        legacy = DEFAULT_LEGACY.get(args.type, ())
    elif args.legacy:
        legacy = tuple(f for f in args.legacy.split(",") if f)
    start = time.time()
    config = write_checkpoint(
        args.out,
        config_from_args(args),
        seed=args.seed,
        dtype=args.dtype or PRESET_DTYPE[args.preset],
        shards=args.shards,
        legacy=legacy,
        tokenizer=args.tokenizer,
    )
    # llama types: state_bytes is the KV cache per token, or with sliding windows their fixed rings
    windowed = any(w is not None for w in getattr(resolve(config), "layer_windows", ()))
    fixed = 0 if args.type in LLAMA_TYPES and not windowed else state_bytes(config)
    print(f"wrote {args.out} ({args.type}, {args.preset}, legacy {list(legacy)}) in {time.time() - start:.1f} s; "
          f"fp32 state bytes per sequence: {fixed} fixed + {kv_bytes_per_token(config)} per token")  # fmt: skip


if __name__ == "__main__":
    main()
