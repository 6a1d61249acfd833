#!/usr/bin/env bash
# K-quants (and batch steps) on the GPU machine in one call: the CUDA op tests of the K types, the golden models
# (every K mix against transformers and the CPU backend), then lmfuse and llama.cpp side by side
# on the same random Q4_K_M and Q4_0 files (tg128, pp512). Logs under $OUT; summary.md collects
# the lines that go into docs/PERF.md.
#   carry: .prebuilt (scripts/gpu_prebuild.sh lmfuse cuda_op_tests), .deps/include
#          (scripts/carry_deps.sh) and .deps/llama.cpp-src-0.3.36.tar.gz
#          (scripts/build_llama_cpp.sh --download-only)
#   STAGES="tests golden bench serve peer" (default: all; serve: lmfuse serve, then llama-server,
#   on the GPU under scripts/loadtest.py, SERVE_C="1 64" streams x SERVE_N=256 tokens of
#   SERVE_MODEL=qwen3-8b-q4_0); PRESETS (default "qwen3-0.6b qwen3-8b");
#   TESTS: the cuda_op_tests filters; BATCH: lmfuse bench -b list for the bench stage (e.g. 1,8,32)
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
STAGES=${STAGES:-"tests golden bench serve peer"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
S="$OUT/summary.md"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"

# llama.cpp's CUDA build runs beside lmfuse's checks (its own cores; ~5 min at -j 10).
LLAMA_PID=
if has peer || has serve; then
  ( scripts/build_llama_cpp.sh --cuda --sdist .deps/llama.cpp-src-0.3.36.tar.gz -j 10 >"$OUT/llama_build.log" 2>&1
    echo "exit $?" >>"$OUT/llama_build.log" ) &
  LLAMA_PID=$!
fi
scripts/gpu_build.sh "$B" lmfuse cuda_op_tests || exit 1
L="$B/lmfuse"
stamp "build: $(head -1 "$OUT/build.log")"

rc=0
if has tests; then
  for f in ${TESTS:-CudaBatch CudaRepack CudaGemv CudaPrefill CudaElementwise}; do
    timeout 300 "$B/cuda_op_tests" "$f" >"$OUT/tests_$f.log" 2>&1 || rc=1
    stamp "cuda_op_tests $f: $(tail -1 "$OUT/tests_$f.log")"
    grep -E "FAILED|failed|Failure" "$OUT/tests_$f.log" | head -20 | tee -a "$S"
  done
fi
if has golden; then
  timeout 400 python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen 64 >"$OUT/golden.log" 2>&1 || rc=1
  grep -E "k_m|q6_k|q2_k|q3_k|iq4|failed|not supported" "$OUT/golden.log" | head -40 | tee -a "$S"
  stamp "golden: $(tail -1 "$OUT/golden.log")"
fi

M=/tmp/kq-models
mkdir -p $M
PRESETS=${PRESETS:-"qwen3-0.6b qwen3-8b"}
for p in $PRESETS; do
  for t in q4_k_m q4_0; do
    [ -s $M/$p-$t.gguf ] || "$L" random-model --preset $p --type $t -o $M/$p-$t.gguf >>"$OUT/random.log" 2>&1
  done
done
if has bench; then
  for p in $PRESETS; do
    for t in q4_k_m q4_0; do
      "$L" bench -m $M/$p-$t.gguf -p 512 -n 128 -r 3 ${BATCH:+-b $BATCH} >"$OUT/bench_$p-$t.log" 2>&1 || rc=1
      stamp "lmfuse $p $t:"
      grep -vE "^\s*$|loading" "$OUT/bench_$p-$t.log" | tail -12 | tee -a "$S"
    done
  done
fi
# Serving: lmfuse serve and llama-server (when built) on the same random file, one after the
# other, each under scripts/loadtest.py (completions API: the random file has no chat template
# llama-server would take) at SERVE_C concurrent streams x SERVE_N tokens (issue 53's CUDA target:
# qwen3-8b Q4_0, 64 x 256, and 1 stream against lmfuse bench's tg).
serve_run() {  # NAME PORT CMD...: starts CMD, waits for it to answer on PORT, runs the load, stops it
  local name=$1 port=$2; shift 2
  "$@" >"$OUT/serve_$name.log" 2>&1 &
  local spid=$!
  for i in $(seq 1 240); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null && break
    sleep 0.5
  done
  for c in ${SERVE_C:-1 64}; do
    timeout 240 python3 scripts/loadtest.py --url http://127.0.0.1:$port -c $c -n ${SERVE_N:-256} \
      --prompts $((c > 1 ? 2 * c : 4)) --completions >"$OUT/loadtest_${name}_c$c.log" 2>&1 || rc=1
    stamp "$name serve, $SP, $c streams x ${SERVE_N:-256}:"
    tail -8 "$OUT/loadtest_${name}_c$c.log" | tee -a "$S"
  done
  kill $spid; wait $spid 2>/dev/null
  tail -3 "$OUT/serve_$name.log" >>"$S"
}
SP=${SERVE_MODEL:-qwen3-8b-q4_0}
if has serve; then
  SM=$M/$SP.gguf
  [ -s $SM ] || "$L" random-model --preset ${SP%-*} --type ${SP##*-} -o $SM >>"$OUT/random.log" 2>&1
  serve_run lmfuse 8093 "$L" serve -m $SM --port 8093 --parallel 64 --queue 256
  [ -z "$LLAMA_PID" ] || { wait $LLAMA_PID; LLAMA_PID=; }
  LS=.deps/llama.cpp-cuda/bin/llama-server
  if [ -x $LS ]; then
    serve_run llama 8094 $LS -m $SM --port 8094 --host 127.0.0.1 -np 64 -cb -c $((64 * 512)) -ngl 99
  else
    stamp "llama-server: not built ($(tail -1 "$OUT/llama_build.log"))"
  fi
fi
if has peer; then
  [ -z "$LLAMA_PID" ] || wait $LLAMA_PID
  stamp "llama.cpp build: $(tail -1 "$OUT/llama_build.log")"
  LB=.deps/llama.cpp-cuda/bin/llama-bench
  if [ -x $LB ]; then
    for p in $PRESETS; do
      for t in q4_k_m q4_0; do
        timeout 240 $LB -m $M/$p-$t.gguf -p 512 -n 128 -r 3 -ngl 99 >"$OUT/llama_$p-$t.log" 2>&1 || rc=1
        stamp "llama.cpp $p $t:"
        grep -E "^\|" "$OUT/llama_$p-$t.log" | tail -2 | tee -a "$S"
        # lmfuse again right after, so each pair is side by side in time too
        "$L" bench -m $M/$p-$t.gguf -p 512 -n 128 -r 3 >"$OUT/bench2_$p-$t.log" 2>&1
        grep -vE "^\s*$|loading" "$OUT/bench2_$p-$t.log" | tail -3 | tee -a "$S"
      done
    done
  else
    grep -E "error|Error" "$OUT/llama_build.log" | head -10 | tee -a "$S"
  fi
fi
stamp "done (rc $rc)"
exit $rc
