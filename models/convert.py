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

Hugging Face checkpoints (issue 29; models/convert_hf.py, models/README.md "Uptraining"):
  nice -n 19 /usr/bin/python3 models/convert.py --from-hf models/runs/uptrain/llama --to t2r --features 32 \
      --out models/runs/uptrain/t2r [--layers 0,2] [--max-tokens 245760 --distill 0.5 --attention-only]
reads an HF Llama (or fla transformer) directory, replaces the softmax attention of the listed layers
(default all; the others stay softmax) with t2r / abc (-> model_type abcd_llama, models/FORMAT.md) or
gsa (-> fla gsa, a hybrid with `attn` when layers stay softmax), and writes an HF-layout directory
the engine loads. --max-tokens N > 0 then finetunes on N tokens (models/hf_train.py: train.py's
windows and token schedule, --attention-only trains the attention parameters only, --distill ALPHA mixes
in KL to the source model's logits), resumable by running the same command again. The text is
tokenised with the source's own tokenizer: its tokenizer.model (SentencePiece, in Python), or, for a
tokenizer.json-only source, its tokenizer.json through `abcd-cli tokenize` (the engine's tokenizer:
the ids the server gives, bos where that tokenizer adds one; --abcd-cli PATH, else $ABCD_CLI, else
build/server/abcd-cli), and is the bundled Brown corpus (models/data/build_corpora.sh builds it) or
the user's: --train-text FILE... (plain text, a document per line, or JSONL with a "text" field) and
optionally --valid-text FILE... (default: every 20th train window). The output keeps the source's
tokenizer files and vocab_size. Errors (an
unsupported source, --layers out of range, head sizes the target cannot hold) are one line naming
the field, exit status 2.
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
    p.add_argument("--from", dest="source", help="softmax model directory (config.json, model.safetensors)")
    p.add_argument("--from-hf", dest="source_hf", help="HF Llama or fla transformer directory (see below)")
    p.add_argument("--to", required=True, choices=["t2r", "abc", "gsa"])
    p.add_argument("--layers", help="--from-hf: comma-separated layers to convert (default: all)")
    p.add_argument("--num-slots", type=int, default=64, help="gsa slots M (fla-hub default 64)")
    p.add_argument("--feature-map", default="swish", choices=["swish", "relu", "t2r"], help="gsa feature map of q and k")
    p.add_argument("--gate-logit-normalizer", type=float, default=8, help="gsa (fla-hub default 8)")
    p.add_argument("--max-tokens", type=int, default=0, help="--from-hf: finetune token budget (0 = convert only)")
    p.add_argument("--attention-only", action="store_true", help="--from-hf: finetune the attention parameters only")
    p.add_argument("--distill", type=float, default=0.0, help="--from-hf: weight alpha of KL(source || model) in the loss")
    p.add_argument("--train-text", nargs="+", metavar="FILE", help="--from-hf: finetune on these files (plain text: a document per line; "
                   "JSONL: each record's \"text\") instead of the bundled Brown corpus")  # fmt: skip
    p.add_argument("--valid-text", nargs="+", metavar="FILE", help="--from-hf: validation text (default: every 20th train window)")
    p.add_argument("--abcd-cli", metavar="PATH", help="--from-hf --max-tokens, a tokenizer.json-only source: the abcd-cli that "
                   "tokenises the text (default: $ABCD_CLI, else build/server/abcd-cli)")  # fmt: skip
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--features", type=int, default=32, help="t2r feature size r")
    p.add_argument("--slots", type=int, default=32, help="abc slots n")
    p.add_argument("--encoder", action="store_true", help="convert encoder self attention too")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300, help="finetune steps (0 = convert only)")
    p.add_argument("--max-minutes", type=float, default=0.0, help="wall-clock cap of the finetune")
    p.add_argument("--lr", type=float, default=7e-4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="weights written (default: bfloat16; --from-hf: the source's torch_dtype)")
    p.add_argument("--set", action="append", default=[], help="TrainConfig override name=value")
    args = p.parse_args(argv)
    if bool(args.source) == bool(args.source_hf):
        p.error("give exactly one of --from and --from-hf")
    if args.source_hf:
        from convert_hf import ConversionError
        from hf_train import ResumeError

        try:
            return convert_hf_main(args)
        except (ConversionError, ResumeError) as e:
            print(f"convert.py: error: {e}", file=sys.stderr)
            sys.exit(2)
    if args.to == "gsa":
        p.error("--to gsa needs --from-hf")
    if args.train_text or args.valid_text:
        p.error("--train-text and --valid-text need --from-hf (--from finetunes on the bundled corpus)")
    args.dtype = args.dtype or "bfloat16"

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


def convert_hf_main(args):
    """--from-hf: convert (and with --max-tokens, finetune) an HF directory; see the module docstring."""
    import filecmp
    import shutil

    import torch

    import convert_hf
    import hf_train
    from abcd_ref.hf import build_model, write_checkpoint

    if (args.train_text or args.valid_text) and args.max_tokens <= 0:
        raise convert_hf.ConversionError("--train-text needs --max-tokens (the finetune's token budget)")
    cfg, tensors = convert_hf.read_source(args.source_hf)
    layers = convert_hf.parse_layers(args.layers, cfg["num_hidden_layers"])
    if not 0.0 <= args.distill <= 1.0:
        raise convert_hf.ConversionError(f"--distill: must be in [0, 1], got {args.distill}")
    options = dict(features=args.features, slots=args.slots, num_slots=args.num_slots, feature_map=args.feature_map,
                   gate_logit_normalizer=args.gate_logit_normalizer, seed=args.seed)  # fmt: skip
    out_cfg, out_tensors = convert_hf.convert(cfg, tensors, args.to, layers, **options)
    source_dir, out = Path(args.source_hf), Path(args.out)
    names = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
    dtype = names[args.dtype] if args.dtype else names.get(convert_hf.source_dtype(source_dir), "f32")
    print(f"{args.source_hf}: {cfg['num_hidden_layers']} layers; converting {layers} to {args.to} -> {out_cfg['model_type']}")
    if args.max_tokens <= 0:
        write_checkpoint(out, out_cfg, dtype=dtype, tensors=out_tensors)
        for name in convert_hf.TOKENIZER_FILES:
            if (source_dir / name).exists():
                shutil.copyfile(source_dir / name, out / name)
        print(f"wrote {out} (not finetuned)")
        return
    # The finetune's tokenizer: tokenizer.model (SentencePiece), else a tokenizer.json alone, which
    # abcd-cli reads (hf_train.encode_documents is given the directory).
    tokenizer = source_dir / "tokenizer.model"
    if not tokenizer.exists():
        if not (source_dir / "tokenizer.json").exists():
            raise convert_hf.ConversionError(f"--max-tokens: {source_dir} has neither tokenizer.model nor tokenizer.json "
                                             "(the finetune tokenises its text with the source's tokenizer)")  # fmt: skip
        tokenizer = source_dir
    try:
        pieces = hf_train_vocab(tokenizer)
    except hf_train.DataError as e:
        raise convert_hf.ConversionError(f"--max-tokens: {e}") from None
    if pieces > cfg["vocab_size"]:
        raise convert_hf.ConversionError(f"--max-tokens: {tokenizer} has {pieces} pieces, more than the source's vocab_size {cfg['vocab_size']}")
    own = tokenizer.is_file() and filecmp.cmp(tokenizer, hf_train.TOKENIZER, shallow=False)
    tc = trainer.TrainConfig(task="lm", steps=10**9, max_tokens=args.max_tokens, batch_size=16, lr=args.lr, warmup=args.warmup,
                             seed=args.seed, threads=1, eval_every=0, final_eval_batches=0)  # fmt: skip
    for item in args.set:
        name, value = item.split("=", 1)
        setattr(tc, name, type(getattr(tc, name))(value))
    try:  # the text and its windows, before any model is built
        hf_train.lm_data(tc.seq_len, cfg.get("bos_token_id") or 1, tokenizer, args.train_text, args.valid_text, args.abcd_cli)
    except hf_train.DataError as e:
        raise convert_hf.ConversionError(str(e)) from None
    model = build_model(out_cfg)
    model.load_state_dict(convert_hf.model_state(model, out_tensors))
    convert_hf.set_training_chunks(model)
    teacher = None
    if args.distill > 0:
        teacher = build_model(cfg)
        teacher.load_state_dict(convert_hf.model_state(teacher, tensors))
    torch.manual_seed(args.seed)
    extra = {"source": str(source_dir), "to": args.to, "layers": layers, "options": options,
             "train_text": args.train_text, "valid_text": args.valid_text}  # fmt: skip
    trainable = convert_hf.attention_parameter if args.attention_only else None
    hf_train.train_hf(model, out_cfg, tc, out, teacher=teacher, distill=args.distill, trainable=trainable, dtype=dtype, extra=extra,
                      tokenizer=tokenizer, train_files=args.train_text, valid_files=args.valid_text,
                      tokenizer_dir=None if own else source_dir, abcd_cli=args.abcd_cli)  # fmt: skip


def hf_train_vocab(tokenizer):
    """Pieces of a SentencePiece model, or the ids of a model directory's tokenizer.json (from it, as
    the engine counts them: one past the largest vocab or added-token id)."""
    import hf_train

    if tokenizer.is_dir():
        return hf_train.tokenizer_json_pieces(tokenizer / "tokenizer.json")
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(tokenizer)).get_piece_size()


if __name__ == "__main__":
    main()
