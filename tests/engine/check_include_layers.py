#!/usr/bin/env python3
"""Fails when a file under engine/ includes a header from a higher engine folder.

The engine's folders, lowest first (a folder may include its own and lower folders only):
  core, device < ops < state < attention < sampling, tokenizer < model < backend
    < scheduler < runtime
KNOWN lists the includes that still point up, each with why; a new one fails the test, and so
does a KNOWN entry that no longer occurs (so the list only shrinks).

Usage: check_include_layers.py [REPO_ROOT]
"""
import pathlib
import re
import sys

RANK = {
    "core": 0, "device": 0,
    "ops": 1,
    "state": 2,
    "attention": 3,
    "sampling": 4, "tokenizer": 4,
    "model": 5,
    "backend": 6,
    "scheduler": 7,
    "runtime": 8,
}

# (file, included header): the attention layer loaders read the model's config and weights.
KNOWN = {
    ("engine/attention/attention_layer.h", "engine/model/model_config.h"):
        "AttentionLayer::Load takes the ModelConfig (d_model, heads)",
    ("engine/attention/attention_layer.h", "engine/model/weights.h"):
        "AttentionLayer::Load reads its tensors through the WeightLoader",
    ("engine/attention/attention_state.cc", "engine/model/model_config.h"):
        "MakeAttentionState sizes a state from the ModelConfig",
    ("engine/attention/attention_state.cc", "engine/model/weights.h"):
        "MakeAttentionState loads rfa/t2r/txl/linformer tensors",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(engine/([a-z_]+)/[^"]+)"', re.M)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found_known = set()
    errors = []
    for path in sorted((root / "engine").rglob("*")):
        if path.suffix not in {".h", ".cc", ".cu", ".cuh"}:
            continue
        rel = path.relative_to(root).as_posix()
        folder = rel.split("/")[1]
        if folder not in RANK:
            errors.append(f"{rel}: folder '{folder}' has no place in the layer order")
            continue
        for header, target in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if target not in RANK:
                errors.append(f"{rel}: includes {header} from unknown folder '{target}'")
            elif RANK[target] > RANK[folder]:
                if (rel, header) in KNOWN:
                    found_known.add((rel, header))
                else:
                    errors.append(f"{rel}: includes {header}: {target}/ is above {folder}/")
    for entry in sorted(set(KNOWN) - found_known):
        errors.append(f"KNOWN entry no longer occurs (remove it): {entry[0]} -> {entry[1]}")
    for error in errors:
        print(error)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
