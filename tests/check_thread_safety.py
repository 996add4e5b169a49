#!/usr/bin/env python3
"""Clang's thread-safety analysis over every translation unit that carries lock annotations.

abcd annotates its locks with Abseil's macros (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED,
...) on absl::Mutex, whose Lock/Unlock and absl::MutexLock are annotated too. g++ ignores the
macros, so this test has clang check them: it reads the build's compile_commands.json, picks the
C++ translation units that are, or directly include, a file of the tree carrying an annotation
(unity sources count when one of their .cc files does), and runs
  clang++ <the unit's -I/-D/-std flags> -fsyntax-only -Wthread-safety -Werror=thread-safety
on each. Any thread-safety diagnostic fails the test: a guarded member read without its lock, a
function that needs a lock called without it, a lock still held at a return, and an annotation
on a type that is not a capability (std::mutex is not one; use absl::Mutex).

It also fails when an annotated file is reached by no translation unit (nothing would check it)
or when no annotated file is found at all. Exit 77 (ctest's skip) when clang++ is absent.

Usage: check_thread_safety.py REPO_ROOT BUILD_DIR [CLANG++]
"""
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

ANNOTATION = re.compile(
    r"\bABSL_(?:PT_)?GUARDED_BY\(|\bABSL_(?:EXCLUSIVE|SHARED)_LOCKS_REQUIRED\(|"
    r"\bABSL_LOCKS_EXCLUDED\(|\bABSL_(?:EXCLUSIVE|SHARED)_LOCK_FUNCTION\(|"
    r"\bABSL_UNLOCK_FUNCTION\(|\bABSL_ASSERT_(?:SHARED_)?LOCK\(")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE_DIRS = ("engine", "server", "loadtest", "tests")


def annotated_files(root):
    """Repo-relative paths of the .h/.cc files under SOURCE_DIRS that carry an annotation."""
    found = set()
    for top in SOURCE_DIRS:
        for path in (root / top).rglob("*"):
            if path.suffix not in (".h", ".cc") or not path.is_file():
                continue
            if ANNOTATION.search(path.read_text(errors="replace")):
                found.add(path.relative_to(root).as_posix())
    return found


def unit_sources(root, unit_file):
    """The repo files a compile_commands entry compiles: itself, or a unity file's members."""
    path = pathlib.Path(unit_file)
    if "/Unity/unity_" not in unit_file:
        return [path]
    return [pathlib.Path(p) for p in INCLUDE.findall(path.read_text())]


def clang_command(entry, clang):
    """The entry's command with clang++, its -I/-D/-include/-std flags, and the analysis on."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = [clang]
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if a == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
            # The precompiled header is GCC's; include the header it was made from instead.
            for header in INCLUDE.findall(pathlib.Path(args[i + 1]).read_text()):
                out += ["-include", header]
            i += 2
            continue
        if a in ("-isystem", "-include", "-I", "-D"):
            out += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-I", "-D", "-std=", "-isystem")) or a in ("-pthread", "-fPIC"):
            out.append(a)
        i += 1
    out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety",
            entry["file"]]
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    build = pathlib.Path(sys.argv[2]).resolve()
    clang = sys.argv[3] if len(sys.argv) > 3 else "clang++"
    if shutil.which(clang) is None:
        print(f"check_thread_safety: {clang} not found (Debian: clang); skipped")
        return 77
    annotated = annotated_files(root)
    if not annotated:
        print("check_thread_safety: no annotated file found; is REPO_ROOT right?", file=sys.stderr)
        return 1
    entries = json.loads((build / "compile_commands.json").read_text())

    units, covered = [], set()
    for entry in entries:
        command = entry.get("command") or " ".join(entry.get("arguments", []))
        if "nvcc" in command.split()[0] or not entry["file"].endswith((".cc", ".cxx", ".cpp")):
            continue
        hits = set()
        for source in unit_sources(root, entry["file"]):
            try:
                rel = source.resolve().relative_to(root).as_posix()
            except ValueError:
                continue  # generated (protobuf) sources
            if rel in annotated:
                hits.add(rel)
            hits.update(h for h in INCLUDE.findall(source.read_text()) if h in annotated)
        if hits:
            units.append(entry)
            covered |= hits
    missing = sorted(annotated - covered)
    if missing:
        print("check_thread_safety: annotated but compiled by no unit of this build:\n  " +
              "\n  ".join(missing), file=sys.stderr)
        return 1

    def check(entry):
        run = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                             capture_output=True, text=True)
        return entry["file"], run.returncode, run.stdout + run.stderr

    failed = 0
    jobs = max(1, min(len(units), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, code, output in pool.map(check, units):
            if code != 0:
                failed += 1
                print(f"FAIL {name}\n{output}")
    print(f"check_thread_safety: {len(units) - failed}/{len(units)} units clean, "
          f"{len(annotated)} annotated files: {', '.join(sorted(annotated))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
