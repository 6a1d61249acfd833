#!/usr/bin/env bash
# GPU check for the CUDA kernels: configure + build (build-cuda, Ninja, -DLMFUSE_CUDA=ON), run the
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

cli=()
if [ ! -e /usr/include/CLI/CLI.hpp ] && [ ! -e .deps/include/CLI/CLI.hpp ]; then cli=(-DCLI11_INCLUDE=/nonexistent-cli11); fi
tests=(-DLMFUSE_TESTS=OFF)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA=ON "${tests[@]}" "${cli[@]}" \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" --target cuda_op_tests cuda_bench_gemv cuda_bench_stream cuda_bench_persist -j"$(nproc)" >"$OUT/build.log" 2>&1 \
  || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"

rc=0
timeout 900 "$BUILD/cuda_op_tests" "$@" 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|failed:|exception|==========" | head -80
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ "${BENCH:-1}" = 1 ]; then "$BUILD/cuda_bench_gemv" 2>&1 | tee "$OUT/bench.log" || rc=1; fi
exit $rc
