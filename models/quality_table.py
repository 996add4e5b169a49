"""Regenerate the quality table: every served attention type, trained the same way, noise measured.

Usage (from the repository root, after building; Debian's python with python3-torch):

  nice -n 19 /usr/bin/python3 models/quality_table.py [--jobs 2] [--out models/runs/quality]
      [--lm-tokens 1228800] [--mt-tokens 614400] [--rows softmax,abc,...] [--dry-run] [--no-bench]

One budget for every row, in training tokens (LM: windows of 128; MT: target tokens), with the
same data order (seed 1234) for every row; rows marked "noise" are trained a second time with
seed 1235 (another init and data order) to measure the seed-to-seed spread, which the table
reports next to the spread between rows. T2R is not trained from scratch: as its paper does, it is
the trained softmax row (seed 1234) with feature maps swapped in and finetuned for a quarter of the
budget (convert.py); the table says so.

Stages, each resumable (a row whose output exists with the same budget is not redone):
  1. train   every row, --jobs at a time with one torch thread each (train.py presets);
  2. eval    LM: test perplexity with `abcd-cli eval` on lm.test.txt (the served engine; equal to
             evaluate.py lm, see README); MT: `abcd-cli translate` greedy and beam 4 over the test
             split, BLEU and chrF by metrics_mt.py; state bytes from `abcd-cli info`;
  3. bench   one at a time after all training (nothing else may run): `abcd-bench decode`
             (LM: batch 1 and 64 at context 100, 32 steps) and `abcd-bench seq2seq` (MT: batch 1 and 64 at
             source = target length 32), tokens/s, 2 threads;
  4. report  OUT/results.json and OUT/table.md (copy them to models/results/quality/ to publish).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
DATA = MODELS / "data" / "out"
sys.path.insert(0, str(MODELS))

LM_WINDOW_TOKENS = 8 * 128  # train.py LM batch: 8 windows of 128 predicted tokens
SEEDS = (1234, 1235)


@dataclass
class Row:
    name: str  # row id and output directory name
    task: str  # "lm" | "mt"
    preset: str  # train.py preset (t2r: the softmax row it converts)
    label: str  # the table's description
    noise: bool = False  # trained with a second seed too
    convert_from: str = ""  # t2r: row name of the softmax model it is converted from
    extra: dict = field(default_factory=dict)


LM_ROWS = [
    Row("softmax", "lm", "lm-softmax", "softmax", noise=True),
    Row("window", "lm", "lm-window", "window, w = 32"),
    Row("window-dilated", "lm", "lm-window-dilated", "window, w = 32, dilation 2"),
    Row("abc", "lm", "lm-abc32", "abc, n = 32 (exp control, ABC_MLP)", noise=True),
    Row("abc-sigmoid", "lm", "lm-abc-sigmoid", "abc, n = 32, sigmoid control"),
    Row("abc-relu", "lm", "lm-abc-relu", "abc, n = 32, relu control"),
    Row("abc-random", "lm", "lm-abc-random", "abc, n = 32, random control (ABC_RD, mean)"),
    Row("abc-position", "lm", "lm-abc-position", "abc, n = 32, position control (causal Linformer, N = 128)"),
    Row("abc-block", "lm", "lm-abc-block", "abc, n = 32, block control (compressive, c = 4)"),
    Row("abc-cluster", "lm", "lm-abc-cluster", "abc, n = 32, cluster control (online k-means)"),
    Row("rfa", "lm", "lm-rfa", "rfa, gaussian, D = 32, gated"),
    Row("elu", "lm", "lm-elu", "elu"),
    Row("t2r", "lm", "", "t2r, r = 32: softmax row + finetune (1/4 budget)", convert_from="softmax"),
]
MT_ROWS = [
    Row("mt-softmax", "mt", "mt-softmax", "softmax encoder, softmax decoder", noise=True),
    Row("mt-abc", "mt", "mt-abc", "softmax encoder, abc decoder (cross 32 / self 8)", noise=True),
    Row("mt-rfa-cross", "mt", "mt-rfa-cross", "softmax encoder, rfa decoder (cross D 64 / self D 32 gated)"),
    Row("mt-t2r-cross", "mt", "mt-t2r-cross", "softmax encoder, t2r decoder (cross 32 / self 4)"),
    Row("mt-elu-cross", "mt", "mt-elu-cross", "softmax encoder, elu decoder (cross and self)"),
]
# Rows whose presets arrive with issue 16 / the rest of issue 15: in the table when train.py has them.
OPTIONAL_ROWS = [
    Row("txl", "lm", "lm-txl", "txl (Transformer-XL), memory 64"),
    Row("mt-gmat", "mt", "mt-gmat", "GMAT encoder (M = 32), softmax cross over the memory, abc self 8"),
    Row("mt-abc-position", "mt", "mt-abc-position", "Linformer (abc position) encoder n 16, cross n 16, self n 8"),
]


def all_rows(presets):
    rows = list(LM_ROWS) + list(MT_ROWS)
    rows += [r for r in OPTIONAL_ROWS if r.preset in presets]
    return rows


def run_names(row):
    """(run directory name, seed) for every training run of a row."""
    out = [(row.name, SEEDS[0])]
    if row.noise:
        out.append((f"{row.name}.seed{SEEDS[1]}", SEEDS[1]))
    return out


def budget_args(row, args):
    """train.py / convert.py overrides that fix the row's budget."""
    if row.task == "lm":
        steps = args.lm_tokens // LM_WINDOW_TOKENS
        if row.convert_from:
            return ["--steps", str(max(1, steps // 4))]
        return ["--steps", str(steps)]
    return ["--steps", "1000000000", "--max-tokens", str(args.mt_tokens)]


def train_command(row, run, seed, args):
    py = [args.python]
    out = str(args.out / run)
    if row.convert_from:
        source = str(args.out / row.convert_from)
        return py + [str(MODELS / "convert.py"), "--from", source, "--to", "t2r", "--features", "32", "--warmup", "10",
                     "--out", out, "--set", "threads=1", "--set", f"seed={seed}"] + budget_args(row, args)
    return py + [str(MODELS / "train.py"), "--preset", row.preset, "--out", out, "--threads", "1", "--seed", str(seed),
                 "--max-minutes", "0"] + budget_args(row, args)


def budget_key(row, args):
    if row.task == "lm":
        return {"lm_tokens": args.lm_tokens // LM_WINDOW_TOKENS * LM_WINDOW_TOKENS // (4 if row.convert_from else 1)}
    return {"mt_tokens": args.mt_tokens}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def trained(row, run, args):
    log = load_json(args.out / run / "train_log.json")
    marker = load_json(args.out / run / "quality_budget.json")
    return log is not None and marker == budget_key(row, args)


def train_one(row, run, seed, args):
    if trained(row, run, args):
        return f"{run}: trained already"
    cmd = train_command(row, run, seed, args)
    (args.out / run).mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(args.out / f"{run}.log", "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        env = dict(os.environ, OMP_NUM_THREADS="1")
        result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{run}: training failed ({args.out / f'{run}.log'})")
    with open(args.out / run / "quality_budget.json", "w") as f:
        json.dump(budget_key(row, args), f)
    return f"{run}: trained in {time.time() - start:.0f} s"


def cli(args, *argv):
    result = subprocess.run([str(args.cli), *argv], capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"abcd-cli {' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


def state_bytes(args, model_dir):
    text = cli(args, "info", "--model", str(model_dir))
    m = re.search(r"state per sequence: (.*)", text)
    return m.group(1).strip() if m else "?"


def translate_scores(args, model_dir, beam):
    from metrics_mt import corpus_bleu, corpus_chrf

    src = DATA / "mt.test.en"
    with open(DATA / "mt.test.de", encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]
    out = cli(args, "translate", "--model", str(model_dir), "--text-file", str(src), "--beam-size", str(beam),
              "--max-tokens", "128", "--threads", "1")
    hyps = out.split("\n")[: len(refs)]
    if len(hyps) != len(refs):
        raise RuntimeError(f"{model_dir}: {len(hyps)} translations for {len(refs)} sources")
    return {"bleu": corpus_bleu(hyps, refs)["score"], "chrf": corpus_chrf(hyps, refs)}


def evaluate_one(row, run, args):
    path = args.out / run / "quality_eval.json"
    cached = load_json(path)
    if cached and cached.get("budget") == budget_key(row, args):
        return cached
    model_dir = args.out / run
    result = {"budget": budget_key(row, args), "state": state_bytes(args, model_dir)}
    if row.task == "lm":
        out = json.loads(cli(args, "eval", "--model", str(model_dir), "--text", str(DATA / "lm.test.txt"), "--json",
                             "--threads", "1"))
        result["test_ppl"] = out["perplexity"]
    else:
        result["greedy"] = translate_scores(args, model_dir, 1)
        result["beam4"] = translate_scores(args, model_dir, 4)
    log = load_json(model_dir / "train_log.json")
    result["train_seconds"] = log["train_seconds"]
    result["tokens"] = log["target_tokens_seen"]
    result["steps"] = log["steps_done"]
    result["valid_ppl"] = log["final_valid_ppl"]
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return result


def bench_one(row, args):
    """Decode tokens/s at batch 1 and 64 (2 threads), run alone."""
    path = args.out / row.name / "quality_bench.json"
    cached = load_json(path)
    if cached:
        return cached
    model_dir = str(args.out / row.name)
    speeds = {}
    if row.task == "lm":
        tmp = args.out / f"{row.name}.bench.json"
        subprocess.run([str(args.bench), "decode", "--models", model_dir, "--batches", "1,64", "--contexts", "100",
                        "--steps", "32", "--rounds", "3", "--prefill_tokens", "64", "--weight_formats", "bf16",
                        "--threads", "2", "--json", str(tmp)], check=True, capture_output=True, cwd=ROOT)
        for point in load_json(tmp)["decode"]["models"][0]["points"]:
            speeds[str(point["batch"])] = point["tokens_per_s"]
    else:
        for batch in (1, 64):
            tmp = args.out / f"{row.name}.bench{batch}.json"
            subprocess.run([str(args.bench), "seq2seq", "--models", model_dir, "--lengths", "32", "--batch",
                            str(batch), "--steps", "32", "--rounds", "3", "--threads", "2", "--json", str(tmp)],
                           check=True, capture_output=True, cwd=ROOT)
            speeds[str(batch)] = seq2seq_tokens_per_s(load_json(tmp))
    with open(path, "w") as f:
        json.dump(speeds, f)
    return speeds


def seq2seq_tokens_per_s(report):
    """The decode tokens/s of the one model and length in an `abcd-bench seq2seq --json` report."""
    points = report["seq2seq"]["models"][0]["points"]
    return points[0]["tokens_per_s"]


def spread(values):
    return max(values) - min(values) if len(values) > 1 else 0.0


def fmt_speed(speeds):
    return f"{speeds.get('1', 0):,.0f} / {speeds.get('64', 0):,.0f}" if speeds else "-"


def report(rows, evals, speeds, args, wall):
    """results.json + table.md: rows in order, the noise rows' second seed beside the first."""
    results = {"lm_tokens": args.lm_tokens // LM_WINDOW_TOKENS * LM_WINDOW_TOKENS, "mt_tokens": args.mt_tokens,
               "seeds": list(SEEDS), "wall_seconds": round(wall), "rows": []}
    lm_lines, mt_lines = [], []
    lm_main, lm_noise, mt_main, mt_noise = [], [], [], []
    for row in rows:
        runs = [evals.get(run) for run, _ in run_names(row)]
        if any(r is None for r in runs):
            continue
        first = runs[0]
        entry = {"row": row.name, "label": row.label, "task": row.task, "runs": runs, "speed": speeds.get(row.name)}
        results["rows"].append(entry)
        speed = fmt_speed(speeds.get(row.name))
        if row.task == "lm":
            ppls = [r["test_ppl"] for r in runs]
            lm_main.append(ppls[0])
            if len(ppls) > 1:
                lm_noise.append(spread(ppls))
            noise = f"{ppls[1]:.1f} (seed {SEEDS[1]}), spread {spread(ppls):.1f}" if len(ppls) > 1 else ""
            lm_lines.append(f"| {row.label} | {ppls[0]:.1f} | {noise} | {first['valid_ppl']:.1f} | {first['tokens']:,} | "
                            f"{first['train_seconds']:.0f} s | {first['state']} | {speed} |")
        else:
            g, b = first["greedy"], first["beam4"]
            mt_main.append(g["bleu"])
            bleus = [r["greedy"]["bleu"] for r in runs]
            if len(bleus) > 1:
                mt_noise.append(spread(bleus))
            noise = f"{bleus[1]:.2f} (seed {SEEDS[1]}), spread {spread(bleus):.2f}" if len(bleus) > 1 else ""
            mt_lines.append(f"| {row.label} | {g['bleu']:.2f} / {g['chrf']:.2f} | {b['bleu']:.2f} / {b['chrf']:.2f} | "
                            f"{noise} | {first['tokens']:,} | {first['train_seconds']:.0f} s | {first['state']} | {speed} |")
    results["lm_spread_between_rows"] = spread(lm_main)
    results["lm_seed_spread"] = lm_noise
    results["mt_spread_between_rows"] = spread(mt_main)
    results["mt_seed_spread"] = mt_noise
    lines = [
        f"LM budget {results['lm_tokens']:,} training tokens per row, MT budget {args.mt_tokens:,} target tokens per "
        f"row; seeds {SEEDS[0]} (second seed {SEEDS[1]} for the noise rows); wall time {wall / 60:.0f} min with "
        f"--jobs {args.jobs}.",
        "",
        "| LM attention | test ppl | second seed | valid ppl | tokens | train time | state / sequence | decode tok/s b1 / b64 |",
        "|---|---|---|---|---|---|---|---|",
        *lm_lines,
        "",
        f"LM spread between rows (test ppl, seed {SEEDS[0]}): {results['lm_spread_between_rows']:.1f}; "
        f"seed-to-seed spread: {', '.join(f'{s:.1f}' for s in lm_noise) or '-'}.",
        "",
        "| MT model | greedy BLEU / chrF | beam 4 BLEU / chrF | second seed (greedy BLEU) | target tokens | train time | state / sequence | decode tok/s b1 / b64 |",
        "|---|---|---|---|---|---|---|---|",
        *mt_lines,
        "",
        f"MT spread between rows (greedy BLEU): {results['mt_spread_between_rows']:.2f}; seed-to-seed spread: "
        f"{', '.join(f'{s:.2f}' for s in mt_noise) or '-'}.",
    ]
    with open(args.out / "results.json", "w") as f:
        json.dump(results, f, indent=1)
    with open(args.out / "table.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=MODELS / "runs" / "quality")
    p.add_argument("--lm-tokens", type=int, default=1228800, help="training tokens per LM row (multiple of 1024)")
    p.add_argument("--mt-tokens", type=int, default=614400, help="target tokens per MT row")
    p.add_argument("--jobs", type=int, default=2, help="trainings at once (one torch thread each)")
    p.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--build", type=Path, default=ROOT / "build")
    p.add_argument("--no-bench", action="store_true", help="skip stage 3")
    p.add_argument("--dry-run", action="store_true", help="print the rows and commands, run nothing")
    args = p.parse_args(argv)
    args.cli = args.build / "server" / "abcd-cli"
    args.bench = args.build / "loadtest" / "abcd-bench"
    return args


def main(argv=None):
    args = parse_args(argv)
    from train import presets

    known = presets()
    rows = all_rows(known)
    if args.rows:
        wanted = args.rows.split(",")
        unknown = [w for w in wanted if w not in {r.name for r in rows}]
        if unknown:
            sys.exit(f"--rows: unknown row(s) {', '.join(unknown)}; known: {', '.join(r.name for r in rows)}")
        rows = [r for r in rows if r.name in wanted or any(r.name == w.convert_from for w in rows if w.name in wanted)]
    missing = [r.preset for r in rows if r.preset and r.preset not in known]
    if missing:
        sys.exit(f"train.py has no preset(s) {', '.join(missing)}")
    if args.dry_run:
        for row in rows:
            for run, seed in run_names(row):
                print(f"{run}: {' '.join(train_command(row, run, seed, args))}")
        return
    for tool in (args.cli, args.bench):
        if not tool.exists():
            sys.exit(f"{tool} is missing: build first (README's test command)")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    jobs = [(row, run, seed) for row in rows if not row.convert_from for run, seed in run_names(row)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for message in pool.map(lambda j: train_one(*j, args), jobs):
            print(message, flush=True)
        # conversions start once the rows they convert exist
        converted = [(row, run, seed) for row in rows if row.convert_from for run, seed in run_names(row)]
        for message in pool.map(lambda j: train_one(*j, args), converted):
            print(message, flush=True)
        pairs = [(row, run) for row in rows for run, _ in run_names(row)]
        evals = dict(zip([run for _, run in pairs], pool.map(lambda p: evaluate_one(*p, args), pairs)))
    print(f"trained and evaluated in {(time.time() - start) / 60:.0f} min", flush=True)
    speeds = {}
    if not args.no_bench:
        for row in rows:  # one at a time: the timings need the machine to themselves
            speeds[row.name] = bench_one(row, args)
    print(report(rows, evals, speeds, args, time.time() - start))


if __name__ == "__main__":
    main()
