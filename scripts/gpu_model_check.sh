#!/usr/bin/env bash
# Whole-engine check on the GPU machine: builds lmfuse with CUDA, compares whole-model logits
# against the golden references and the CPU backend, and runs the benchmarks. Logs under $OUT.
# Carry .deps (scripts/carry_deps.sh) so CLI11 / nlohmann-json headers exist there.
#   STAGES="correct bench ab profile depth" (default: all); KNOBS / DEPTH_KNOBS: the A/B lists
#   (KNOBS defaults to every decode knob: docs/PERF.md S36-2's table, ~6 min with AB_REPS=2)
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-"correct sanitize bench ab profile depth"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
scripts/gpu_build.sh "$BUILD" lmfuse || exit 1
L="$BUILD/lmfuse"
M=/tmp/models
mkdir -p $M
for p in ${PRESETS:-qwen3-0.6b qwen3-4b qwen3-8b}; do
  [ -s $M/$p.gguf ] || $L random-model --preset $p --type q4_0 --no-tokenizer -o $M/$p.gguf 2>>"$OUT/random.log"
done
rc=0
if has correct; then
  python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen ${GEN:-256} 2>&1 | tee "$OUT/golden.md" || rc=1
  python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen 64 --model $M/qwen3-0.6b.gguf 2>&1 | tee -a "$OUT/golden.md" || rc=1
  # Llama 3.2 1B's shape: adjacent RoPE pairs, head_dim 64, Llama 3.1+ RoPE frequency divisors.
  [ -s $M/llama3.2-1b.gguf ] || $L random-model --preset llama3.2-1b --type q4_0 --no-tokenizer -o $M/llama3.2-1b.gguf 2>>"$OUT/random.log"
  python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen 64 --model $M/llama3.2-1b.gguf 2>&1 | tee -a "$OUT/golden.md" || rc=1
fi
if has sanitize; then
  # compute-sanitizer on a short run (prefill + decode steps, then chained greedy steps) of a tiny
  # golden model.
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$L" logits -m tests/data/golden/qwen3-tiny-q4_0.gguf \
      --device cuda --tokens 1,2,3,4,5 --all --prefill 2 --generate 4 -o /tmp/san.bin --knob cuda_graph=0 >"$OUT/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c -E 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitize_$tool.log") clean summaries)" | tee -a "$OUT/golden.md"
  done
fi
if has bench; then
  for p in qwen3-0.6b qwen3-4b qwen3-8b llama3.2-1b qwen3-1.7b; do  # those generated (PRESETS, the correct stage)
    [ -s $M/$p.gguf ] && $L bench -m $M/$p.gguf -p ${PP:-512} -n 128 -r ${REPS:-3} 2>&1 | tee -a "$OUT/bench.md"
  done
fi
if has ab; then
  for k in ${KNOBS:-ln_fusion qkv_fusion gateup_fusion cuda_graph resid_fusion fusion logits_norm_fusion rope_fusion qkv_post_pdl qkv_post_room o_room gateup_room down_fit rope_table pdl_early_trigger gemv_coresident gemv_wide gemv_keep_x gemv_split_k gemv_split3 gemv_xq attn_xq attn_direct attn_head_split attn_staged attn_single_split attn_o_fusion decode_pipeline}; do
    for p in ${AB_PRESETS:-qwen3-0.6b qwen3-4b qwen3-8b}; do
      [ -s $M/$p.gguf ] && $L bench -m $M/$p.gguf -p 0 -n 128 -r ${AB_REPS:-3} --ab $k 2>&1 | tee -a "$OUT/ab.md"
    done
  done
fi
if has profile; then
  $L bench -m $M/${PROFILE_PRESET:-qwen3-8b}.gguf -p 0 -n 32 -r 1 --profile 2>&1 | tee "$OUT/profile.md"
fi
if has depth; then
  $L bench -m $M/qwen3-8b.gguf -p 0 -n 128 -d 16 -r 2 2>&1 | tee "$OUT/depth.md"
  $L bench -m $M/qwen3-8b.gguf -p 0 -n 128 -d 4096 -r 1 2>&1 | tee -a "$OUT/depth.md"
  # Knobs A/B'd at depth 4096 (the split + merge steps), e.g. DEPTH_KNOBS="o_room".
  for k in ${DEPTH_KNOBS:-}; do
    $L bench -m $M/qwen3-8b.gguf -p 0 -n 128 -d 4096 -r 1 --ab $k 2>&1 | tee -a "$OUT/depth.md"
  done
fi
exit $rc
