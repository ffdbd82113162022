#!/usr/bin/env bash
# Fails, naming each file, when a tracked C++ or CUDA source differs from .clang-format (clang-format
# --dry-run -Werror). Installs clang-format with apt-get when it is missing.
#
#   bash scripts/check-format.sh          # check
#   bash scripts/check-format.sh --fix    # format them in place
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v clang-format >/dev/null 2>&1; then
  as_root=()
  [[ $(id -u) -eq 0 ]] || as_root=(sudo)
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends clang-format
fi

mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
if [[ ${1:-} == --fix ]]; then
  clang-format -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  clang-format --dry-run -Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done
if [[ ${#unformatted[@]} -gt 0 ]]; then
  printf 'check-format: differs from .clang-format: %s\n' "${unformatted[@]}" >&2
  echo "check-format: ${#unformatted[@]} of ${#files[@]} files; run bash scripts/check-format.sh --fix ($(clang-format --version))" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files match .clang-format ($(clang-format --version))"
