#!/usr/bin/env bash
# Session 48 device run 2: the tree after the K-quant work (issue 54) on the GPU machine.
# Builds a snapshot of HEAD (.ab/new2.tar.gz) and llama.cpp's CUDA tools (carried trimmed sdist),
# runs the CUDA op tests and the golden checks (the new K-quant fixtures must be reported as not
# supported on cuda), checks the device choice on a Q4_K_M file (auto -> CPU with a note, cuda ->
# a clear error), then llama-bench on Q4_K_M (the peer figure lmfuse's CUDA K-quant path will be
# measured against) and both engines on Q4_0 8B (the ratio that target refers to).
#   run(command="bash scripts/ab/s48_2.sh", carry=[".deps/include", ".deps/llama.cpp-src-0.3.36.tar.gz", ".ab"])
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
S="$OUT/summary.md"
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$S"
mkdir -p /tmp/new && tar -C /tmp/new -xzf .ab/new2.tar.gz && mkdir -p /tmp/new/.deps && cp -r .deps/include .deps/llama.cpp-src-0.3.36.tar.gz /tmp/new/.deps/ && cd /tmp/new || exit 1
( scripts/build_llama_cpp.sh --cuda --sdist .deps/llama.cpp-src-0.3.36.tar.gz -j 10 >"$OUT/llama_build.log" 2>&1; echo "llama.cpp build exit $?" >>"$OUT/llama_build.log" ) &
LP=$!
scripts/gpu_build.sh build-gpu lmfuse cuda_op_tests >>"$S" 2>&1 || { tail -30 "$OUT/build.log" >>"$S"; exit 1; }
L=$PWD/build-gpu/lmfuse
echo "## cuda_op_tests" >>"$S"
timeout 300 build-gpu/cuda_op_tests 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|failed:|passed|==========" | tail -8 >>"$S"
echo "## golden (check_models.py --device cuda --gen 64)" >>"$S"
timeout 300 python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen 64 >"$OUT/golden.log" 2>&1; echo "check_models exit $?" >>"$S"
grep -E "not supported|failed|FAIL" "$OUT/golden.log" | head -20 >>"$S"; tail -3 "$OUT/golden.log" >>"$S"
M=/tmp/models; mkdir -p $M
$L random-model --preset qwen3-0.6b --type q4_k_m -o $M/q06-q4km.gguf >/dev/null 2>&1 || $L random-model --preset qwen3-0.6b --type q4_k_m --no-tokenizer -o $M/q06-q4km.gguf
$L random-model --preset qwen3-8b --type q4_k_m -o $M/q8b-q4km.gguf >/dev/null 2>&1 || $L random-model --preset qwen3-8b --type q4_k_m --no-tokenizer -o $M/q8b-q4km.gguf
$L random-model --preset qwen3-8b --type q4_0 -o $M/q8b-q40.gguf >/dev/null 2>&1 || $L random-model --preset qwen3-8b --type q4_0 --no-tokenizer -o $M/q8b-q40.gguf
echo "## device choice on a Q4_K_M file" >>"$S"
LMFUSE_LOG=info timeout 120 $L bench -m $M/q06-q4km.gguf -p 16 -n 8 -r 1 2>&1 | grep -E "CPU|CUDA|running on" | head -3 >>"$S"
timeout 60 $L bench -m $M/q06-q4km.gguf -p 16 -n 8 -r 1 --device cuda 2>&1 | tail -1 >>"$S"
wait $LP; tail -1 "$OUT/llama_build.log" >>"$S"
LB=.deps/llama.cpp-cuda/bin/llama-bench
echo "## llama-bench (CUDA, -ngl 99) and lmfuse bench" >>"$S"
for f in q06-q4km q8b-q4km q8b-q40; do
  timeout 200 $LB -m $M/$f.gguf -ngl 99 -p 512 -n 128 -r 3 -o md 2>&1 | grep -E "pp512|tg128" >>"$S"
done
timeout 200 $L bench -m $M/q8b-q40.gguf -p 512 -n 128 -r 3 2>&1 | grep -E "pp512|tg128" >>"$S"
timeout 200 $LB -m $M/q8b-q40.gguf -ngl 99 -p 512 -n 128 -r 3 -o md 2>&1 | grep -E "pp512|tg128" >>"$S"
cat "$S"
