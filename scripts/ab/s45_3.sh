#!/usr/bin/env bash
# Needs the measurement-only build option removed from kernels/gemv.cuh in session 51: run it on
# a checkout of commit 9861f5d.
# Device run for docs/PERF.md S44-3 and S45-3 (gemv_xq: the gate/up producer of down's int8 codes),
# on the GPU machine, logs under $OUT. Tracked (not in the git-ignored .ab/) because each session
# starts from a fresh checkout.
#   Here, first (each ~10-20 min from scratch on 2 cores; see scripts/gpu_prebuild.sh):
#     scripts/gpu_prebuild.sh lmfuse cuda_op_tests
#     PACK=.prebuilt-notail BUILD=build-carry-notail GPU_BUILD_DEFS=-DLMFUSE_GEMV_XQ_NO_TAIL=1 \
#       scripts/gpu_prebuild.sh lmfuse
#   then: run(command="bash scripts/ab/s45_3.sh", carry=[".deps", ".prebuilt", ".prebuilt-notail"])
#   (without the packs it compiles both builds there, ~3-4 min of the call).
# Steps: S44-3: GateUpQuantized bitwise op test; 8B and 4B timelines at LMFUSE_GEMV_XQ 0 and 1;
# `--ab gemv_xq` on 8B and 4B (tg128, -r 3); 8B logits and 64 greedy ids at both settings.
# S45-3: the 8B and 4B timelines of the no-tail build (-DLMFUSE_GEMV_XQ_NO_TAIL=1: timing only,
# its logits are wrong) at LMFUSE_GEMV_XQ=1.
# $OUT gets few files (the device tool returns at most 8): summary.md, timelines.md and the
# build logs (build.log, configure.log when it compiled; the same under notail/).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
T=/tmp/s45_3 && rm -rf $T && mkdir -p $T
S="$OUT/summary.md"
B=build-gpu
OUT="$OUT" scripts/gpu_build.sh $B lmfuse cuda_op_tests | tee -a "$S"; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
OUT="$OUT/notail" PACK=.prebuilt-notail GPU_BUILD_DEFS=-DLMFUSE_GEMV_XQ_NO_TAIL=1 \
  scripts/gpu_build.sh build-notail lmfuse | tee -a "$S"; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$S"
timeout 300 $B/cuda_op_tests GateUpQuantized 2>&1 | tail -5 | tee -a "$S"
L=$B/lmfuse
M=/tmp/models
mkdir -p $M
for p in qwen3-8b qwen3-4b; do
  [ -s $M/$p.gguf ] || $L random-model --preset $p --type q4_0 --no-tokenizer -o $M/$p.gguf 2>>$T/random.log
done
# Timelines (bench --profile prints the per-kernel profile, then the replayed step's timeline).
for p in qwen3-8b qwen3-4b; do
  for x in 0 1; do
    LMFUSE_GEMV_XQ=$x $L bench -m $M/$p.gguf -p 0 -n 32 -r 1 --profile >$T/tl_${p}_xq$x.md 2>&1
  done
  LMFUSE_GEMV_XQ=1 build-notail/lmfuse bench -m $M/$p.gguf -p 0 -n 32 -r 1 --profile >$T/tl_${p}_notail.md 2>&1
done
for p in qwen3-8b qwen3-4b; do
  $L bench -m $M/$p.gguf -p 0 -n 128 -r 3 --ab gemv_xq 2>&1 | tee -a "$S"
done
# 8B logits and greedy ids at both settings (the codes are bit-identical: rel-L2 0, same ids).
toks=785,6722,315,9625,374,12095,13,576,3974,13876,38835,916,279,15678,5562,13
for x in 0 1; do
  $L logits -m $M/qwen3-8b.gguf --device cuda --tokens $toks --generate 64 -o /tmp/l$x.bin \
    --knob gemv_xq=$x >$T/ids_xq$x.txt 2>&1
done
python3 - $T <<'PY' | tee -a "$S"
import sys, numpy as np
t = sys.argv[1]
a, b = np.fromfile("/tmp/l0.bin", np.float32), np.fromfile("/tmp/l1.bin", np.float32)
rel = float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(a.astype(np.float64)))
ids = lambda x: [l for l in open(f"{t}/ids_xq{x}.txt").read().splitlines() if l.replace(" ", "").isdigit()]
same = ids(0) == ids(1) and len(ids(0)) == 1
print(f"8B gemv_xq 1 vs 0: logits rel-L2 {rel:.2e}, greedy ids (64) {'identical' if same else 'DIFFER'}")
PY
for f in $T/tl_*.md; do echo "== $(basename "$f")"; cat "$f"; done >"$OUT/timelines.md"
