#!/usr/bin/env python3
"""Fails when a file under engine/ includes a header from a higher engine folder.

The engine's folders, lowest first (a folder may include its own and lower folders only):
  core, device < ops < state < attention < sampling, tokenizer < model < backend
    < scheduler < runtime
KNOWN lists the includes that still point up, each with why; a new one fails the test, and so
does a KNOWN entry that no longer occurs (so the list only shrinks). engine/README.md states the
order on one line, "Layer order, lowest first: `core, device < ops < ...`"; the test also fails
when that line is missing or differs from RANK, so the documented order cannot drift.

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

# (file, included header) -> why: includes that still point up (none today; the attention
# loaders live in model/, attention_loader.h).
KNOWN = {}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(engine/([a-z_]+)/[^"]+)"', re.M)

ORDER_LINE = re.compile(r"^Layer order, lowest first: `([^`]*)`\s*$", re.M)


def documented_order_errors(root: pathlib.Path) -> list:
    """Errors when engine/README.md's order line is missing, malformed or differs from RANK."""
    readme = root / "engine" / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as error:
        return [f"engine/README.md: cannot read the layer order: {error}"]
    lines = ORDER_LINE.findall(text)
    if len(lines) != 1:
        return [f"engine/README.md: expected one line 'Layer order, lowest first: `a, b < c`', "
                f"found {len(lines)}"]
    documented = {}
    for rank, group in enumerate(lines[0].split("<")):
        for folder in group.split(","):
            folder = folder.strip()
            if not folder or folder in documented:
                return [f"engine/README.md: layer order line has an empty or repeated folder "
                        f"('{folder}'): {lines[0]}"]
            documented[folder] = rank
    def groups(ranks):  # lowest first, each a set of folders of equal rank
        by_rank = {}
        for folder, rank in ranks.items():
            by_rank.setdefault(rank, []).append(folder)
        return [by_rank[rank] for rank in sorted(by_rank)]

    def render(ranks):
        return " < ".join(", ".join(group) for group in groups(ranks))

    if [set(g) for g in groups(documented)] != [set(g) for g in groups(RANK)]:
        return [f"engine/README.md: layer order '{render(documented)}' differs from "
                f"check_include_layers.py's RANK '{render(RANK)}'"]
    return []


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found_known = set()
    errors = documented_order_errors(root)
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
