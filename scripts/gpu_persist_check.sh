#!/usr/bin/env bash
# The persistent decode-layer prototype on the GPU machine (bench/cuda_bench_persist.cu,
# docs/PERF.md session 20): build, the host checks of every form, the in-flight sweep, the
# attention inside (short and long contexts), and the per-phase marks. Logs under $OUT (default ./out).
#   scripts/gpu_persist_check.sh              (all steps, ~90 s after the build)
#   F=4 POS=64 scripts/gpu_persist_check.sh   (the in-flight cap and position for steps 3-4)
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-cuda}
F=${F:-4}
POS=${POS:-64}
scripts/gpu_build.sh "$BUILD" cuda_bench_persist || exit 1
P="$BUILD/cuda_bench_persist"
rc=0
step() { echo "== $*"; timeout 120 "$P" "$@" 2>&1 | grep -v "^copy" | tee -a "$OUT/persist.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1; }
step --check --quant-all --attn --pos "$POS" --configs 0,1 --inflight 0,"$F"
step --check --quant-all --attn --pos 1000 --split-rows 16 --configs 0,1
step --check --attn --pos 4096 --configs 0 --shape 8b
step --check --configs 0,1
step --check --quant-act --configs 0
step --quant-all --configs 0 --inflight 0,"$F"
step --quant-all --attn --pos "$POS" --split-rows 128 --configs 0 --inflight "$F"
step --quant-all --attn --pos "$POS" --split-rows 128 --configs 0 --inflight "$F" --marks --shape 8b
step --quant-all --attn --pos 4096 --configs 0 --inflight "$F" --marks --shape 8b
exit $rc
