#!/usr/bin/env bash
# Prints one hash of every file that goes into the CUDA build's binaries (CMake files, src/,
# include/, tools/, tests/, bench/), by path and content, the same on this machine and on the GPU
# machine's copy of the tree (no git needed there). scripts/gpu_prebuild.sh records it beside the
# binaries it packs; scripts/gpu_build.sh uses them only when the tree still has the same hash.
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt cmake src include tools tests bench -type f \
  \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' -o -name '*.h' -o -name '*.hpp' \
     -o -name '*.cuh' -o -name '*.inc' -o -name '*.cmake' -o -name 'CMakeLists.txt' \) -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
