#!/usr/bin/env bash
# lmfuse quantize vs llama-quantize, error per tensor and type mix (issue 54, item 5), from
# nothing: builds what is missing, makes the float sources, quantizes each with both tools and
# compares them with scripts/quant_compare.py (gguf-py's reference decoder).
#
#   scripts/quant_compare.sh OUTDIR [--mixes "q4_k_m q6_k ..."] [--sources "smol rand"]
#                            [--layers N] [-t THREADS] [-j JOBS] [--keep]
#
# Sources:
#   smol  SmolLM2-135M-Instruct (trained weights): models/smollm2-135m-instruct-q4_1.gguf
#         (fetched by scripts/get-demo-model.sh) converted to F16 by `lmfuse quantize
#         --allow-requantize ... f16`; its dequantized Q4_1 values are the float source. Width 576
#         is not a multiple of 256, so many tensors take the 32-block fallback types.
#   rand  `lmfuse random-model --preset qwen3-0.6b --type f16 --no-tokenizer` (Gaussian weights,
#         1.1 GB; --layers N makes it smaller).
# Mixes (default): q4_k_m q5_k_m q6_k q3_k_m q2_k iq4_xs iq4_nl (none needs an imatrix).
# Writes under OUTDIR: <src>-<mix>.txt (per-tensor table, per-type and overall summary, type mix),
# <src>-<mix>.json, <src>-<mix>.llama.log (llama-quantize's log), smol-llama-q4_k_m.run.txt
# (lmfuse running llama-quantize's file: the "files people download" check),
# smol-lmfuse-q4_k_m.llama-cli.txt (llama-cli running lmfuse's file) and summary.md
# (one table; exit status 1 when some same-type tensor has lmfuse RMSE > 1.02 x llama's).
# The quantized GGUFs are deleted after their comparison unless --keep (smol ones are kept).
# Cost: llama.cpp's CPU build ~10 CPU-minutes once (scripts/build_llama_cpp.sh); then all 7
# mixes on both sources took 19 min wall with -t 1 on a shared 2-core machine (per mix: a few
# seconds per tool and ~12 s of numpy on smol; ~20-40 s per tool and ~90 s of numpy on rand).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
out=""
mixes="q4_k_m q5_k_m q6_k q3_k_m q2_k iq4_xs iq4_nl"
sources="smol rand"
layers=""
threads=2
jobs=2
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --mixes) mixes=${2:?}; shift ;;
    --sources) sources=${2:?}; shift ;;
    --layers) layers=${2:?}; shift ;;
    -t) threads=${2:?}; shift ;;
    -j) jobs=${2:?}; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "quant_compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "quant_compare.sh: one OUTDIR only" >&2; exit 2; }; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { usage >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
say() { echo "quant_compare: $*" >&2; }

py=${PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || py=$(command -v python3)
"$py" -c "import gguf, numpy" 2>/dev/null || {
  say "$py lacks gguf/numpy: run scripts/setup.sh (it makes .venv/) or set PYTHON"; exit 1; }

# 1. The tools.
lmfuse=$root/build/lmfuse
if [ ! -x "$lmfuse" ]; then
  if [ ! -f build/CMakeCache.txt ]; then
    say "configuring build/ (CPU)"
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA=OFF >/dev/null
  fi
  say "building lmfuse (-j $jobs)"
  cmake --build build -j "$jobs" --target lmfuse >/dev/null
fi
scripts/build_llama_cpp.sh -j "$jobs" >&2
llq=$root/.deps/llama.cpp/bin/llama-quantize

# 2. The float sources.
src_file() {  # NAME -> path of its F16 GGUF, made if missing
  case "$1" in
    smol)
      local f="$out/smol-f16.gguf"
      if [ ! -s "$f" ]; then
        local q4; q4=$(PYTHON="$py" scripts/get-demo-model.sh)
        "$lmfuse" quantize -q --allow-requantize "$q4" "$f" f16 -t "$threads" >&2
      fi
      echo "$f" ;;
    rand)
      local f="$out/rand-f16${layers:+-l$layers}.gguf"
      if [ ! -s "$f" ]; then
        "$lmfuse" random-model --preset qwen3-0.6b --type f16 --no-tokenizer ${layers:+--layers "$layers"} \
          -o "$f" >&2
      fi
      echo "$f" ;;
    *) say "unknown source '$1' (smol or rand)"; exit 2 ;;
  esac
}

# 3. Quantize with both tools and compare.
upper() { echo "$1" | tr '[:lower:]' '[:upper:]'; }
results=()
rc=0
for s in $sources; do
  f=$(src_file "$s")
  tag=$s${layers:+-l$layers}
  [ "$s" = smol ] && tag=smol
  for m in $mixes; do
    a="$out/$tag-llama-$m.gguf" b="$out/$tag-lmfuse-$m.gguf"
    if [ ! -s "$a" ]; then
      say "llama-quantize $tag $m"
      "$llq" "$f" "$a.part" "$(upper "$m")" "$threads" >"$out/$tag-$m.llama.log" 2>&1 || {
        tail -5 "$out/$tag-$m.llama.log" >&2; say "llama-quantize failed"; exit 1; }
      mv "$a.part" "$a"
    fi
    if [ ! -s "$b" ]; then
      say "lmfuse quantize $tag $m"
      "$lmfuse" quantize -q --force "$f" "$b.part" "$m" -t "$threads" >"$out/$tag-$m.lmfuse.log" 2>&1 || {
        tail -5 "$out/$tag-$m.lmfuse.log" >&2; say "lmfuse quantize failed"; exit 1; }
      mv "$b.part" "$b"
    fi
    say "compare $tag $m"
    "$py" scripts/quant_compare.py "$f" "$a" "$b" --label "$tag/$m" --json "$out/$tag-$m.json" \
      >"$out/$tag-$m.txt" || rc=1
    grep -E "^\[$tag/$m\] (overall|worst|type mix:|PASS|FAIL)" "$out/$tag-$m.txt" >&2 || true
    results+=("$out/$tag-$m.json")
    if [ "$s" = smol ] && [ "$m" = q4_k_m ]; then
      # llama-quantize's file in lmfuse: must load and produce sensible text.
      say "lmfuse run on llama-quantize's $tag Q4_K_M"
      "$lmfuse" run -m "$a" -p "The capital of France is" -n 16 --temp 0 --device cpu -t "$threads" \
        >"$out/smol-llama-q4_k_m.run.txt" 2>&1 || { say "lmfuse run failed on $a"; rc=1; }
      cat "$out/smol-llama-q4_k_m.run.txt" >&2
      # And the other way: llama.cpp runs lmfuse's file (one chat turn, greedy).
      say "llama-cli on lmfuse's $tag Q4_K_M"
      timeout 120 "$root/.deps/llama.cpp/bin/llama-cli" -m "$b" -p "What is the capital of France?" -n 24 \
        --temp 0 -st -t "$threads" --simple-io </dev/null >"$out/smol-lmfuse-q4_k_m.llama-cli.txt" 2>&1 \
        || { say "llama-cli failed on $b"; rc=1; }
      grep -A1 "^> What" "$out/smol-lmfuse-q4_k_m.llama-cli.txt" >&2 || true
    fi
    [ "$keep" = 1 ] || [ "$s" = smol ] || rm -f "$a" "$b"
  done
done

"$py" scripts/quant_compare.py --table "${results[@]}" >"$out/summary.md" || true
cat "$out/summary.md"
say "results in $out (summary.md, <src>-<mix>.txt)"
exit $rc
