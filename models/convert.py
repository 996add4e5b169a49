"""Turn a trained softmax model directory into a T2R (or ABC) model and finetune it briefly.

This is the recipe of the T2R paper (Kasai et al., 2021, "Finetuning Pretrained Transformers
into RNNs"): keep every pretrained weight (embeddings, q/k/v/o, FFN, LayerNorms), swap the
softmax of each self attention layer for a feature map phi(x) = relu(W x + b) with a new random
W, b (t2r), or for ABC slots with a new random control projection (abc), then finetune the whole
model for a short while. Cross attention of encoder-decoder models is kept as it is.

Usage (from the repository root):
  nice -n 19 /usr/bin/python3 models/convert.py --from models/runs/softmax-lm --to t2r --features 32 \
      --out models/runs/t2r-lm --steps 300 --max-minutes 2.5
  /usr/bin/python3 models/convert.py --from DIR --to abc --slots 32 --out OUT --steps 0   # swap only

--steps 0 writes the converted model without finetuning. The finetune uses models/train.py
(same data pipeline, AdamW, warmup + cosine); any TrainConfig field can be overridden with
--set name=value.
"""

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from abcd_ref import AttentionSpec, ModelConfig, build_model, export  # noqa: E402
import train as trainer  # noqa: E402


def converted_config(config, spec, encoder=False):
    """Copy of `config` with every decoder (and, if asked, encoder) self attention set to `spec`."""
    out = copy.deepcopy(config)
    stacks = [out.decoder_layers] + ([out.encoder_layers] if encoder else [])
    for layers in stacks:
        for layer in layers:
            layer.attention = copy.deepcopy(spec)
    out.validate()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="softmax model directory (config.json, model.safetensors)")
    p.add_argument("--to", required=True, choices=["t2r", "abc"])
    p.add_argument("--features", type=int, default=32, help="t2r feature size r")
    p.add_argument("--slots", type=int, default=32, help="abc slots n")
    p.add_argument("--encoder", action="store_true", help="convert encoder self attention too")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300, help="finetune steps (0 = convert only)")
    p.add_argument("--max-minutes", type=float, default=0.0, help="wall-clock cap of the finetune")
    p.add_argument("--lr", type=float, default=7e-4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--set", action="append", default=[], help="TrainConfig override name=value")
    args = p.parse_args(argv)

    source = ModelConfig.load(Path(args.source) / "config.json")
    spec = AttentionSpec(type="t2r", features=args.features) if args.to == "t2r" else AttentionSpec(type="abc", slots=args.slots)
    config = converted_config(source, spec, args.encoder)
    tc = trainer.TrainConfig(
        task="mt" if config.is_encoder_decoder else "lm",
        steps=args.steps, max_minutes=args.max_minutes, lr=args.lr, warmup=args.warmup, init_from=str(args.source),
    )
    if config.is_encoder_decoder:
        tc.batch_size, tc.batch_tokens = 64, 1200
    for item in args.set:
        name, value = item.split("=", 1)
        setattr(tc, name, type(getattr(tc, name))(value))
    if args.steps == 0:
        model = build_model(config, seed=tc.seed)
        trainer.init_for_training(model, config, tc.seed)
        copied, kept = trainer.copy_matching(model, args.source)
        print(f"copied {len(copied)} tensors; new (randomly initialised): {kept}")
        export(model, config, args.out, dtype=args.dtype, tokenizer_path=trainer.TOKENIZERS[tc.task])
        print(f"wrote {args.out} (not finetuned)")
        return
    trainer.train(config, tc, args.out, dtype=args.dtype, device=args.device)


if __name__ == "__main__":
    main()
