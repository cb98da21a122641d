#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given binaries load (ldd, then
# dpkg -S), one per line. The images' runtime stages install exactly these, so the list follows
# the build instead of being a second recipe to keep in step.
# Usage: runtime-packages.sh BINARY_OR_LIBRARY...
set -euo pipefail
(($# > 0)) || { echo "usage: runtime-packages.sh BINARY..." >&2; exit 2; }
for file in "$@"; do
  [ -e "$file" ] || { echo "runtime-packages: no such file: $file" >&2; exit 1; }
  if ldd "$file" | grep -q "not found"; then
    echo "runtime-packages: $file has unresolved libraries:" >&2
    ldd "$file" | grep "not found" >&2
    exit 1
  fi
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)": the resolved path.
  ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r library; do
  # With merged /usr the path ldd prints may be the one dpkg does not know: try both, and the
  # target of a symbolic link.
  candidates=("$library" "$(readlink -f "$library")")
  for path in "${candidates[@]}"; do
    candidates+=("/usr${path#/usr}" "${path#/usr}")
  done
  owner=""
  for path in "${candidates[@]}"; do
    owner=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
  done
  if [ -z "$owner" ]; then
    echo "runtime-packages: no Debian package owns $library" >&2
    exit 1
  fi
  echo "$owner"
done | sort -u
