#!/usr/bin/env bash
# Session 48 device run (a snapshot of HEAD, .ab/new.tar.gz, so edits during the run cannot disturb it): the CUDA path after the many-sequence core (issue 52: Session over a
# runtime engine on paged backends; CUDA keeps its own cache through the legacy StepInput path;
# the QKV epilogue's q rope found by structure). Builds this tree and the baseline 4fd5023
# (.ab/base.tar.gz = git archive 4fd5023, carried), runs the CUDA op tests and the golden checks,
# then tg128 of both builds alternately on random qwen3-0.6b / 8b Q4_0.
#   run(command="bash scripts/ab/s48_1.sh", carry=[".deps/include", ".ab"])
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
S="$OUT/summary.md"
R=$PWD; mkdir -p /tmp/new && tar -C /tmp/new -xzf .ab/new.tar.gz && cp -r .deps .ab /tmp/new/ && cd /tmp/new || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$S"
scripts/gpu_build.sh build-gpu lmfuse cuda_op_tests >>"$S" 2>&1 || { tail -30 "$OUT/build.log" >>"$S"; exit 1; }
( mkdir -p /tmp/base && tar -C /tmp/base -xzf .ab/base.tar.gz && cp -r .deps /tmp/base/ &&
  cmake -S /tmp/base -B /tmp/base/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA=ON -DLMFUSE_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90-real >"$OUT/base_build.log" 2>&1 &&
  cmake --build /tmp/base/b --target lmfuse -j16 >>"$OUT/base_build.log" 2>&1 ) &
BASE_PID=$!
echo "## cuda_op_tests" >>"$S"
timeout 400 build-gpu/cuda_op_tests 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|failed:|passed|==========" | tail -8 >>"$S"
wait $BASE_PID; echo "baseline build: exit $?" >>"$S"
L=build-gpu/lmfuse B=/tmp/base/b/lmfuse
echo "## golden (check_models.py --device cuda --gen 64)" >>"$S"
timeout 300 python3 scripts/check_models.py --lmfuse "$L" --device cuda --gen 64 >"$OUT/golden.log" 2>&1; echo "check_models exit $?" >>"$S"
tail -15 "$OUT/golden.log" >>"$S"
echo "## serve on CUDA" >>"$S"
$L serve -m tests/data/golden/qwen3-tiny-q4_0.gguf --port 0 2>&1 | head -2 >>"$S"
M=/tmp/models; mkdir -p $M
for p in qwen3-0.6b qwen3-8b; do $L random-model --preset $p --type q4_0 --no-tokenizer -o $M/$p.gguf >/dev/null 2>&1; done
echo "## tg128, new (this tree) and base (4fd5023) alternately" >>"$S"
for round in 1 2; do
  for p in qwen3-0.6b qwen3-8b; do
    for who in new base; do
      bin=$L; [ $who = base ] && bin=$B
      r=$($bin bench -m $M/$p.gguf -p 0 -n 128 -r 3 --json 2>/dev/null | grep tg128)
      echo "$who $p round $round: $r" >>"$S"
    done
  done
done
$L bench -m $M/qwen3-8b.gguf -p 512 -n 0 -r 2 2>&1 | tail -2 >>"$S"
cat "$S"
