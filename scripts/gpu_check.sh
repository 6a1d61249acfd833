#!/usr/bin/env bash
# GPU check for the CUDA kernels: build (build-cuda, through scripts/gpu_build.sh: the carried
# .prebuilt/ binaries when they match the tree, else configure + build here), run the
# op tests and the micro-benchmark (BENCH=0: tests only), logs under $OUT (default ./out). Works on the bare GPU machine:
# no GoogleTest there (cuda_op_tests has its own harness) and the CLI11 header that only the
# lmfuse CLI needs is satisfied with .deps/include when carried, else a nonexistent path (the CLI
# target is not built here).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-cuda}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  echo "gtest headers: $(ls -d /usr/include/gtest 2>/dev/null || echo none)"
  nvcc --version | tail -2
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

scripts/gpu_build.sh "$BUILD" cuda_op_tests cuda_bench_gemv || exit 1

rc=0
timeout 900 "$BUILD/cuda_op_tests" "$@" 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|failed:|exception|==========" | head -80
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ "${BENCH:-1}" = 1 ]; then "$BUILD/cuda_bench_gemv" 2>&1 | tee "$OUT/bench.log" || rc=1; fi
exit $rc
