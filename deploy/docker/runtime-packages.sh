#!/usr/bin/env bash
# Prints the distribution packages that hold the shared libraries abcd's binaries load, one per
# line: the runtime image installs exactly these (so the list follows the builder's distribution,
# Debian 12 for the CPU image, Ubuntu 24.04 for the CUDA one, and cannot drift from the build).
#
#   deploy/docker/runtime-packages.sh BINARY_OR_LIBRARY...
#
# Fails when a library is not found or belongs to no package (it would be missing at run time).
set -euo pipefail
(($#)) || { echo "usage: $0 FILE..." >&2; exit 2; }

libraries=$(ldd "$@" | awk '
  /:$/ { next }  # "FILE:" headers when ldd is given several files
  /not found/ { print "MISSING " $1; next }
  $2 == "=>" && $3 ~ /^\// { print $3 }
  $1 ~ /^\// { print $1 }' | sort -u)
if grep -q '^MISSING' <<<"$libraries"; then
  echo "runtime-packages: unresolved libraries:" >&2
  grep '^MISSING' <<<"$libraries" >&2
  exit 1
fi

# dpkg records either /lib/... or /usr/lib/... (merged /usr), and the real file behind an
# alternatives symlink (libopenblas.so.0 -> openblas-pthread/libopenblas.so.0): ask for every
# spelling at once (one dpkg-query reads the file lists once).
declare -A spellings=()
queries=()
for library in $libraries; do
  real=$(readlink -f "$library")
  spellings[$library]="$library $real /usr$library /usr$real ${library#/usr} ${real#/usr}"
  read -r -a more <<<"${spellings[$library]}"
  queries+=("${more[@]}")
done
declare -A owner_of=()
while IFS= read -r line; do
  # "libgrpc++1.51:amd64: /usr/lib/x86_64-linux-gnu/libgrpc++.so.1.51" (a line may name
  # several packages, "a, b: path"; "diversion by ..." lines carry no owner)
  [[ "$line" == diversion* || "$line" != *": /"* ]] && continue
  owner_of["/${line#*: /}"]="${line%%: /*}"
done < <(dpkg-query -S "${queries[@]}" 2>/dev/null || true)

packages=""
for library in $libraries; do
  found=""
  for spelling in ${spellings[$library]}; do
    found="${owner_of[$spelling]:-}"
    [[ -n "$found" ]] && break
  done
  if [[ -z "$found" ]]; then
    echo "runtime-packages: no package owns $library" >&2
    exit 1
  fi
  packages+=$(sed -E 's/, /\n/g' <<<"$found" | sed -E 's/:[a-z0-9_]+$//')$'\n'
done
sort -u <<<"$packages" | sed '/^$/d'
