#!/usr/bin/env bash
# Nsight Compute on one launch of a micro-benchmark (GPU machine, after scripts/gpu_check.sh built
# build-cuda): per-kernel sections, per-SASS-instruction stall samples and the raw stall-reason
# metrics (NAME.stalls.txt), as text under $OUT.
#   scripts/gpu_ncu.sh NAME KERNEL_REGEX SHAPE      e.g. reg_down gemv_kernel 8b.down
#   (SHAPE may be several words, e.g. "--chain 8b 64" for a kernel of the decode chain)
# BENCH picks the benchmark (default cuda_bench_gemv) and SKIP the launches skipped first (40), e.g.
#   BENCH=cuda_bench_persist SKIP=5 scripts/gpu_ncu.sh p8b persist_kernel \
#     "--quant-all --attn --pos 64 --configs 0 --inflight 4 --shape 8b"
set -uo pipefail
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-cuda}
BENCH=${BENCH:-cuda_bench_gemv}
SKIP=${SKIP:-40}
name=$1 kernel=$2 shape=$3
ncu --clock-control none -k "regex:$kernel" --launch-skip "$SKIP" --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
  --section Occupancy --section SchedulerStats -o "$OUT/$name" -f "$BUILD/$BENCH" $shape >"$OUT/$name.run.log" 2>&1
ncu -i "$OUT/$name.ncu-rep" --page details >"$OUT/$name.details.txt" 2>&1
ncu -i "$OUT/$name.ncu-rep" --page source --print-source sass --csv >"$OUT/$name.sass.csv" 2>&1
# Warp stall reasons (the details page summarizes them in prose only): every raw metric whose
# name mentions a stall, with its value and unit.
ncu -i "$OUT/$name.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    names, units, vals = rows[0], rows[1], rows[2]
    for n, u, v in zip(names, units, vals):
        if "stall" in n:
            print(n, v, u)
' >"$OUT/$name.stalls.txt"
rm -f "$OUT/$name.ncu-rep"
grep -E "Duration|DRAM Throughput" "$OUT/$name.details.txt" | head -3 | sed "s/^/$name: /"
