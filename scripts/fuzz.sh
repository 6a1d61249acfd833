#!/usr/bin/env bash
# Builds the fuzzers of what parses untrusted input with clang (libFuzzer + ASan + UBSan) in
# build-fuzz and runs each for FUZZ_SECONDS (default 60):
# - fuzz_gguf, the GGUF reader, from valid files: a few written by gguf-py (when importable) and
#   the ones the unit tests write with our Writer;
# - fuzz_jinja, the chat-template interpreter, from real chat templates (tests/data) and the
#   Jinja semantics cases;
# - fuzz_tokenizer, encode/decode of any bytes with the demo model's tokenizer
#   (models/smollm2-135m-instruct-q4_1.gguf, or FUZZ_TOKENIZER=a GGUF / tokenizer.json; skipped
#   when there is none), from the tokenizer reference texts.
# Usage: scripts/fuzz.sh            FUZZ_SECONDS=120 JOBS=2 scripts/fuzz.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
seeds="$root/tests/fuzz/corpus/seeds"
corpus="$root/tests/fuzz/corpus/work"
jseeds="$root/tests/fuzz/corpus/jinja_seeds"
jcorpus="$root/tests/fuzz/corpus/jinja_work"
tseeds="$root/tests/fuzz/corpus/tok_seeds"
tcorpus="$root/tests/fuzz/corpus/tok_work"
mkdir -p "$seeds" "$corpus" "$jseeds" "$jcorpus" "$tseeds" "$tcorpus"

# The libraries need coverage (fuzzer-no-link) and sanitizer instrumentation too, not just the
# fuzz target itself, or libFuzzer cannot see into the parser.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLMFUSE_FUZZ=ON -DLMFUSE_TESTS=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build "$build" --target fuzz_gguf fuzz_jinja fuzz_tokenizer -j"${JOBS:-2}"

# Seeds from gguf-py: small files covering every value type, nested arrays, alignment, all
# supported tensor types.
if python3 -c 'import gguf, numpy' 2>/dev/null; then
  python3 - "$seeds" <<'PY'
import sys, numpy as np, gguf
Q = gguf.GGMLQuantizationType
out = sys.argv[1]
x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
for i, (q, align) in enumerate([(Q.F32, None), (Q.F16, 64), (Q.BF16, 8), (Q.Q8_0, None), (Q.Q4_0, 16), (Q.Q4_1, 32)]):
    w = gguf.GGUFWriter(f"{out}/py_{i}.gguf", "seed")
    if align: w.add_custom_alignment(align)
    w.add_uint8("a.u8", 1); w.add_int16("a.i16", -3); w.add_bool("a.b", True); w.add_float64("a.f", 0.5)
    w.add_uint64("a.u64", 9); w.add_string("a.s", "hi")
    w.add_array("a.arr", ["x", "y"]); w.add_array("a.nested", [[1, 2], [3]])
    a = x if q == Q.F32 else (x.astype(np.float16) if q == Q.F16 else gguf.quants.quantize(x, q))
    w.add_tensor("t0", a, raw_dtype=None if q in (Q.F32, Q.F16) else q)
    w.add_tensor("t1", x[:, :32].copy())
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
fi
# Seeds from our Writer: the round-trip tests keep their files in LMFUSE_TEST_TMP.
test_bin="${TEST_FORMAT:-$root/build-gguf/tests/test_format}"
if [ -x "$test_bin" ]; then
  tmp="$build/gguf_test_files"
  mkdir -p "$tmp"
  LMFUSE_TEST_TMP="$tmp" "$test_bin" --gtest_filter='GgufRoundTrip.*' >/dev/null 2>&1 || true
  for f in "$tmp"/rt_*.gguf; do [ -f "$f" ] && cp "$f" "$seeds/ours_$(basename "$f")"; done
fi

# Seeds for the template fuzzer: every template the tests render.
python3 - "$root/tests/data/tokenizer/chat_refs.json" "$jseeds" <<'PY'
import json, sys
refs = json.load(open(sys.argv[1]))
texts = list(refs["templates"].values())  # qwen3, llama3, smollm2, llama4
texts += [c["template"] for c in refs["jinja"]]
for i, t in enumerate(texts):
    open(f"{sys.argv[2]}/t{i}.jinja", "w").write(t)
PY
# ... and the inputs the fuzzer once failed on (libFuzzer runs every seed first, so each is checked).
cp "$root"/tests/fuzz/jinja_regressions/*.jinja "$jseeds"/
# Seeds for the tokenizer fuzzer: the texts whose ids the tests check against HF tokenizers.
python3 - "$root/tests/data/tokenizer/qwen3_refs.json" "$tseeds" <<'PY'
import json, sys
for i, c in enumerate(json.load(open(sys.argv[1]))["cases"]):
    open(f"{sys.argv[2]}/s{i}.txt", "w").write(c["text"])
PY

cd "$build"
"$build/tests/fuzz_gguf" "$corpus" "$seeds" -max_total_time="${FUZZ_SECONDS:-60}" -max_len=8192 \
  -rss_limit_mb=2048 -print_final_stats=1
# A template's render may take up to its 2M-step budget (~1 s natively, more under ASan).
"$build/tests/fuzz_jinja" "$jcorpus" "$jseeds" -max_total_time="${FUZZ_SECONDS:-60}" -max_len=16384 \
  -rss_limit_mb=2048 -timeout=60 -print_final_stats=1
tokenizer="${FUZZ_TOKENIZER:-$root/models/smollm2-135m-instruct-q4_1.gguf}"
if [ -e "$tokenizer" ]; then
  LMFUSE_FUZZ_TOKENIZER="$tokenizer" "$build/tests/fuzz_tokenizer" "$tcorpus" "$tseeds" \
    -max_total_time="${FUZZ_SECONDS:-60}" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1
else
  echo "fuzz_tokenizer skipped: no $tokenizer (scripts/get-demo-model.sh fetches it)"
fi
