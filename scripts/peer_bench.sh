#!/usr/bin/env bash
# lmfuse bench vs llama.cpp's llama-bench on one GGUF, run alternately in one go so both see the
# same machine load, then the ratios lmfuse / llama.cpp per test (pp = prompt processing,
# tg = generation; > 1 means lmfuse is faster).
#
#   scripts/peer_bench.sh MODEL.gguf THREADS [BENCH ARGS...]
#   scripts/peer_bench.sh /tmp/q06.gguf 2 -p 512 -n 128 -r 3
#
# BENCH ARGS go to both tools unchanged (both read -p, -n, -r, -d; lists like -p 128,512 work);
# the default is -p 512 -n 128 -r 3. Each tool runs ROUNDS times (default 2) in the order
# A B B A ..., so a load change during the run hits both alike; a test's t/s is the mean of its
# rounds' means.
#
# Environment:
#   LMFUSE        lmfuse binary (default build/lmfuse)
#   LLAMA_BENCH   llama-bench (default .deps/llama.cpp-cuda/bin/llama-bench when CUDA is present
#                 and that exists, else .deps/llama.cpp/bin/llama-bench; build it with
#                 scripts/build_llama_cpp.sh [--cuda])
#   ROUNDS        alternations (default 2)
#   LMFUSE_ARGS   extra args for lmfuse bench only (e.g. "--device cpu")
#   LLAMA_ARGS    extra args for llama-bench only (e.g. "-ngl 0")
#   PEER_OUT      folder for the raw JSON of each run (default: a temp folder, removed)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
model=$1 threads=$2; shift 2
[ -s "$model" ] || { echo "peer_bench: model '$model' not found" >&2; exit 2; }
[[ "$threads" =~ ^[0-9]+$ ]] || { echo "peer_bench: THREADS: expected a number, got '$threads'" >&2; exit 2; }
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-p 512 -n 128 -r 3)
rounds=${ROUNDS:-2}

lmfuse=${LMFUSE:-$root/build/lmfuse}
if [ -z "${LLAMA_BENCH:-}" ]; then
  LLAMA_BENCH=$root/.deps/llama.cpp/bin/llama-bench
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 \
     && [ -x "$root/.deps/llama.cpp-cuda/bin/llama-bench" ]; then
    LLAMA_BENCH=$root/.deps/llama.cpp-cuda/bin/llama-bench
  fi
fi
[ -x "$lmfuse" ] || { echo "peer_bench: no lmfuse at $lmfuse (cmake --build build --target lmfuse)" >&2; exit 2; }
[ -x "$LLAMA_BENCH" ] || { echo "peer_bench: no llama-bench at $LLAMA_BENCH (scripts/build_llama_cpp.sh)" >&2; exit 2; }

if [ -n "${PEER_OUT:-}" ]; then out=$PEER_OUT; mkdir -p "$out"
else out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi

# shellcheck disable=SC2206  # the *_ARGS variables are word lists on purpose
lm_cmd=("$lmfuse" bench -m "$model" -t "$threads" "${args[@]}" ${LMFUSE_ARGS:-} --json)
# shellcheck disable=SC2206
ll_cmd=("$LLAMA_BENCH" -m "$model" -t "$threads" "${args[@]}" ${LLAMA_ARGS:-} -o json)
echo "lmfuse:    ${lm_cmd[*]}"
echo "llama.cpp: ${ll_cmd[*]}"
echo "load before: $(uptime)"

run_tool() {  # NAME ROUND
  local log="$out/$1.$2.err"
  if [ "$1" = lmfuse ]; then "${lm_cmd[@]}" > "$out/$1.$2.json" 2> "$log"
  else "${ll_cmd[@]}" > "$out/$1.$2.json" 2> "$log"; fi || {
    echo "peer_bench: $1 (round $2) failed:" >&2; tail -20 "$log" >&2; exit 1; }
}
for ((i = 1; i <= rounds; i++)); do
  if (( i % 2 )); then order=(lmfuse llama); else order=(llama lmfuse); fi
  for t in "${order[@]}"; do
    echo "round $i/$rounds: $t..." >&2
    run_tool "$t" "$i"
  done
done
echo "load after:  $(uptime)"

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def lmfuse_round(path):  # JSON lines: {"test": "pp512", "ts_mean": .., "ts_sd": ..}
    res, info = {}, {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            res[j["test"]] = (j["ts_mean"], j["ts_sd"])
            info = {"model": j.get("model"), "backend": j.get("backend")}
    return res, info

def llama_round(path):  # one JSON array of tests
    res, info = {}, {}
    for j in json.load(open(path)):
        p, n, d = j["n_prompt"], j["n_gen"], j.get("n_depth", 0)
        name = f"pp{p}" if n == 0 else f"tg{n}" if p == 0 else f"pp{p}+tg{n}"
        if d:
            name += f" @ d{d}"
        res[name] = (j["avg_ts"], j["stddev_ts"])
        info = {"model": f"{j.get('model_type')}", "backend":
                f"{j.get('backends')} {j.get('cpu_info') or ''} {j.get('gpu_info') or ''}".strip(),
                "build": f"{j.get('build_commit')} ({j.get('build_number')})"}
    return res, info

tools = {"lmfuse": lmfuse_round, "llama": llama_round}
data, infos = {}, {}
for tool, parse in tools.items():
    for r in range(1, rounds + 1):
        res, info = parse(f"{out}/{tool}.{r}.json")
        infos[tool] = info
        for test, v in res.items():
            data.setdefault(tool, {}).setdefault(test, []).append(v)

def mean(xs):
    return sum(xs) / len(xs)

def table(tool, title):
    print(f"\n{title}: {infos[tool]}")
    print("| test | " + " | ".join(f"round {r}" for r in range(1, rounds + 1)) + " | mean t/s |")
    print("| --- |" + " ---: |" * (rounds + 1))
    for test, vals in data.get(tool, {}).items():
        cells = " | ".join(f"{m:.2f} ± {s:.2f}" for m, s in vals)
        print(f"| {test} | {cells} | {mean([m for m, _ in vals]):.2f} |")

table("lmfuse", "lmfuse bench")
table("llama", "llama-bench")
print("\n| test | lmfuse t/s | llama.cpp t/s | lmfuse / llama.cpp |")
print("| --- | ---: | ---: | ---: |")
summary = {}
for test, vals in data.get("lmfuse", {}).items():
    other = data.get("llama", {}).get(test)
    a = mean([m for m, _ in vals])
    if not other:
        print(f"| {test} | {a:.2f} | - | - |")
        continue
    b = mean([m for m, _ in other])
    summary[test] = round(a / b, 3) if b > 0 else None
    print(f"| {test} | {a:.2f} | {b:.2f} | {a / b:.3f} |" if b > 0 else f"| {test} | {a:.2f} | {b:.2f} | - |")
print("ratios: " + json.dumps(summary))
PY
