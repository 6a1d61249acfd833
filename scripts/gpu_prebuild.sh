#!/usr/bin/env bash
# Builds the CUDA binaries on this machine (no GPU needed) and packs them into .prebuilt/
# (git-ignored) for the GPU machine, where scripts/gpu_build.sh uses them instead of compiling:
#   scripts/gpu_prebuild.sh [TARGET...]   (default: lmfuse cuda_op_tests cuda_bench_gemv)
# then name ".prebuilt" in the device tool's carry list. An experiment build gets its own pack and
# build folder: PACK=.prebuilt-x BUILD=build-carry-x GPU_BUILD_DEFS="-DLMFUSE_...=1" (defines for
# the CUDA code; scripts/gpu_build.sh takes the same PACK and GPU_BUILD_DEFS).
# The build leaves out the optional PCRE2 / utf8proc (the GPU machine has neither library, so a
# binary linked to them would not load there), records the CUDA toolkit's usual library folders as
# run paths, and keeps only sm_90 machine code, uncompressed (no PTX: the H200 runs the sm_90 code;
# see the packing). The pack is tied to the tree by scripts/source_stamp.sh: edit a source after
# packing and the GPU machine compiles instead. Takes ~10-20 min from scratch on 2 cores, seconds
# when only a few files changed.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build-carry}
P=${PACK:-.prebuilt}
defs=${GPU_BUILD_DEFS:-}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(lmfuse cuda_op_tests cuda_bench_gemv)
stamp=$(scripts/source_stamp.sh)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA=ON -DLMFUSE_TESTS=OFF -DLMFUSE_ALLOW_MISSING_DEPS=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_CUDA_ARCHITECTURES=90-real "-DCMAKE_CUDA_FLAGS=--no-compress $defs" \
  "-DCMAKE_BUILD_RPATH=/usr/local/cuda/lib64;/usr/local/cuda/lib;/usr/local/cuda/targets/x86_64-linux/lib" >/dev/null
cmake --build "$B" --target "${targets[@]}"
[ "$(scripts/source_stamp.sh)" = "$stamp" ] || { echo "gpu_prebuild: the sources changed during the build; run it again" >&2; exit 1; }
rm -rf "$P" && mkdir -p "$P/stage"
for t in "${targets[@]}"; do strip -o "$P/stage/$t" "$B/$t"; done
# One thread and a dictionary larger than a binary, so xz finds the device code that every binary
# carries again (the backend's kernels): that is why the build leaves its fatbins uncompressed.
XZ_OPT="-T1 -6 --lzma2=dict=256MiB" tar -C "$P/stage" -cJf "$P/bin.tar.xz" "${targets[@]}"
rm -rf "$P/stage"
printf '%s\n' "${targets[@]}" >"$P/targets"
echo "$defs" >"$P/defs"
echo "$stamp" >"$P/stamp"
echo "packed ${targets[*]} of tree $stamp${defs:+ with $defs}: $(du -h "$P/bin.tar.xz" | cut -f1) (carry \"${P#./}\")"
