#!/usr/bin/env bash
# Prefill check on the GPU machine (issue 6): builds the op tests, the routing sweep and lmfuse
# with CUDA; runs the prefill op tests, the sweep (bench/cuda_bench_prefill.cu), `lmfuse bench`
# prefill figures with the in-kernel/outer A/B, and the golden whole-model checks. Logs under
# $OUT. Carry .deps (scripts/carry_deps.sh) for the CLI's headers.
#   STAGES="tests sweep bench tg sanitize golden" (default: tests sweep bench golden); SWEEP_ARGS passes options to the sweep;
#   PRESETS, PP (default "512,2048,8192"), AB_KNOBS, PROFILE_PP, REPS for bench.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-"tests sweep bench golden"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
scripts/gpu_build.sh "$BUILD" lmfuse cuda_op_tests cuda_bench_prefill || exit 1
L="$BUILD/lmfuse"
M=/tmp/models
mkdir -p $M
rc=0
if has tests; then
  "$BUILD/cuda_op_tests" ${TEST_FILTER:-CudaPrefill} 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|failed|exception|==========|Failure|rel" | head -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if has sweep; then
  "$BUILD/cuda_bench_prefill" ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep.txt" | tail -5 || rc=1
fi
if has bench || has tg; then
  for p in ${PRESETS:-qwen3-0.6b qwen3-8b}; do
    [ -s $M/$p.gguf ] || $L random-model --preset $p --type q4_0 --no-tokenizer -o $M/$p.gguf 2>>"$OUT/build.log"
  done
fi
if has bench; then
  for p in ${PRESETS:-qwen3-0.6b qwen3-8b}; do
    $L bench -m $M/$p.gguf -p ${PP:-512,2048,8192} -n 0 -r ${REPS:-3} 2>&1 | tee -a "$OUT/bench.md"
    for k in ${AB_KNOBS:-prefill_inkernel_dequant prefill_tc_attention qkv_fusion gateup_fusion resid_fusion}; do
      $L bench -m $M/$p.gguf -p 512 -n 0 -r ${REPS:-3} --ab $k 2>&1 | grep -E "pp512|=" | tee -a "$OUT/bench.md"
    done
    $L bench -m $M/$p.gguf -p ${PROFILE_PP:-512} -n 0 -r 1 --profile 2>&1 | tee -a "$OUT/profile.md"
  done
fi
if has tg; then  # decode unchanged by prefill work?
  for p in ${PRESETS:-qwen3-0.6b qwen3-8b}; do
    $L bench -m $M/$p.gguf -p 0 -n 128 -r 3 2>&1 | tee -a "$OUT/bench.md"
  done
fi
if has sanitize; then  # prefill kernels under compute-sanitizer: 70 tokens (several tiles), each route
  toks=$(python3 -c "print(','.join(str((i*37+11)%250) for i in range(70)))")
  for route in 1 0; do
    for tool in memcheck racecheck; do
      LMFUSE_PREFILL_INKERNEL_DEQUANT=$route compute-sanitizer --tool $tool --error-exitcode 9 "$L" logits \
        -m tests/data/golden/qwen3-tiny-q4_1.gguf --device cuda --tokens "$toks" --all -o /tmp/san.bin \
        >"$OUT/sanitize.log" 2>&1
      echo "compute-sanitizer $tool, in-kernel=$route: exit $?" | tee -a "$OUT/sanitize.md"
    done
  done
fi
if has golden; then
  python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen ${GEN:-64} 2>&1 | tee "$OUT/golden.md" || rc=1
fi
exit $rc
