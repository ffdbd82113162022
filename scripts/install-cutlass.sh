#!/usr/bin/env bash
# Installs the CUTLASS/CuTe C++ headers that the CUDA MoE path's grouped GEMMs use (docs/MOE.md), from
# the nvidia-cutlass package on PyPI at the version pinned in scripts/cutlass-version.txt, into
# build/deps/nvidia-cutlass-<version> (no Python package of yours is touched). CMake finds them there
# (cmake/cutlass.cmake); SWITCHYARD_CUTLASS_DIR overrides. Idempotent: with the headers present it does
# nothing. Prints the include directory.
#
#   bash scripts/install-cutlass.sh
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=$(tr -d '[:space:]' <"$repo_root/scripts/cutlass-version.txt")
target=$repo_root/build/deps/nvidia-cutlass-$version
include_dir=$target/cutlass_library/source/include

if [[ ! -f $include_dir/cutlass/cutlass.h ]]; then
  python=${SWITCHYARD_CUTLASS_PYTHON:-python3}
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "install-cutlass: '$python -m pip' is not available (install python3-pip, or set SWITCHYARD_CUTLASS_PYTHON)" >&2
    exit 1
  fi
  echo "install-cutlass: nvidia-cutlass==$version into $target" >&2
  rm -rf "$target.partial"
  # --no-deps: only the headers are wanted, not the Python DSL's dependencies.
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --disable-pip-version-check --no-deps --target "$target.partial" \
    "nvidia-cutlass==$version" >&2
  rm -rf "$target"
  mv "$target.partial" "$target"
fi
echo "$include_dir"
