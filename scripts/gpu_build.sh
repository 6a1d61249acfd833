#!/usr/bin/env bash
# The CUDA build step of the scripts/gpu_*.sh checks, on the GPU machine:
#   scripts/gpu_build.sh BUILD TARGET...     (log: $OUT/build.log)
# When the carried .prebuilt/ (scripts/gpu_prebuild.sh) holds every TARGET, packed from a tree
# with this tree's scripts/source_stamp.sh hash, and each loads here (no library missing), they are
# unpacked into BUILD and nothing compiles: a device run then spends none of its time on the
# 80-120 s build. Otherwise BUILD is configured and the TARGETs built here, as before. The first
# line printed says which happened. PACK (default .prebuilt) and GPU_BUILD_DEFS (defines for the
# CUDA code, default none) name an experiment build's pack, as for scripts/gpu_prebuild.sh; the
# pack is used only when it was built with the same defines, and a build here gets them too.
set -uo pipefail
B=$1; shift
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
start=$(date +%s)
P=${PACK:-.prebuilt}
defs=${GPU_BUILD_DEFS:-}

prebuilt() {  # prints why not and returns 1 when the packed binaries cannot stand in
  local t
  [ -s "$P/bin.tar.xz" ] && [ -s "$P/stamp" ] || { echo "no $P/ carried"; return 1; }
  [ "$(cat "$P/stamp")" = "$(scripts/source_stamp.sh)" ] || { echo "packed from another tree (stamp $(cat "$P/stamp"))"; return 1; }
  [ "$(cat "$P/defs" 2>/dev/null)" = "$defs" ] || { echo "packed with other defines ($(cat "$P/defs" 2>/dev/null))"; return 1; }
  for t in "$@"; do grep -qx "$t" "$P/targets" || { echo "$t not packed"; return 1; }; done
  rm -rf "$B.unpack" && mkdir -p "$B.unpack" && tar -C "$B.unpack" -xJf "$P/bin.tar.xz" || { echo "unpack failed"; return 1; }
  for t in "$@"; do
    if ldd "$B.unpack/$t" 2>&1 | grep -q "not found"; then
      echo "$t does not load here: $(ldd "$B.unpack/$t" 2>&1 | grep 'not found' | tr -s ' \t\n' ' ')"; return 1
    fi
  done
  if [ -x "$B.unpack/lmfuse" ] && ! "$B.unpack/lmfuse" --help >/dev/null 2>&1; then echo "lmfuse --help failed"; return 1; fi
  mkdir -p "$B" && mv -f "$B.unpack"/* "$B"/ && rm -rf "$B.unpack"
}

why=$(prebuilt "$@")
if [ $? -eq 0 ]; then
  echo "build: prebuilt binaries of tree $(cat "$P/stamp")${defs:+ with $defs} ($*), $(( $(date +%s) - start )) s" | tee "$OUT/build.log"
  exit 0
fi
rm -rf "$B.unpack"
echo "build: compiling here ($why)" | tee "$OUT/build.log"
cli=()
if [ ! -e /usr/include/CLI/CLI.hpp ] && [ ! -e .deps/include/CLI/CLI.hpp ]; then cli=(-DCLI11_INCLUDE=/nonexistent-cli11); fi
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA=ON -DLMFUSE_TESTS=OFF -DLMFUSE_ALLOW_MISSING_DEPS=ON "${cli[@]}" \
  "-DCMAKE_CUDA_FLAGS=$defs" >"$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$B" --target "$@" -j"$(nproc)" >>"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build: done in $(( $(date +%s) - start )) s"
