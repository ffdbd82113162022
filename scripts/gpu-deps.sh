#!/usr/bin/env bash
# Fills .deps/ with what the GPU machine needs and cannot install (it has no package registry), from
# this machine's Debian packages, so that it travels with the working tree to a `run` there:
#   .deps/googletest   GoogleTest's sources (scripts/gpu-check.sh builds them with the tests)
#   .deps/bench/usr    CLI11 and nlohmann/json, unpacked (tools/bench/CMakeLists.txt looks there)
#   .deps/cutlass      the pinned CUTLASS headers (scripts/install-cutlass.sh), include/ and
#                      tools/util/include/ as in a checkout (scripts/gpu-check.sh passes SWITCHYARD_CUTLASS_DIR)
# .deps/ is untracked and never committed; about 35 MB.
#
#   bash scripts/gpu-deps.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

as_root=()
[[ $(id -u) -eq 0 ]] || as_root=(sudo)
if [[ ! -d /usr/src/googletest ]]; then
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends googletest
fi
mkdir -p .deps
rm -rf .deps/googletest
cp -r /usr/src/googletest .deps/googletest

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && apt-get download -q libcli11-dev nlohmann-json3-dev)
rm -rf .deps/bench
mkdir -p .deps/bench
for deb in "$scratch"/*.deb; do dpkg -x "$deb" .deps/bench; done
cutlass_include=$(bash scripts/install-cutlass.sh)
rm -rf .deps/cutlass
mkdir -p .deps/cutlass/tools/util
cp -r "$cutlass_include" .deps/cutlass/include
cp -r "$cutlass_include/../tools/util/include" .deps/cutlass/tools/util/include
echo "gpu-deps: .deps/ holds googletest, under bench/usr CLI11 and nlohmann/json, and the CUTLASS headers ($(du -sh .deps | cut -f1))"
