#!/usr/bin/env python3
"""Single-thread encoding throughput: lmfuse's tokenizer vs Hugging Face `tokenizers`, on the
same text (tests/data/tokenizer/corpus.json joined by newlines, repeated).

  python3 scripts/bench_tokenizer.py [--build build-tok] [--repeat 200]

Runs HF in this process (RAYON_NUM_THREADS=1; one encode() call on one string), then the C++
timing test (test_tokenizer --gtest_filter='*DISABLED_Bench*'), checks both produced the same
number of tokens, and prints both figures and the ratio. Best of 5 runs each, caches warm.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-tok"))
    ap.add_argument("--repeat", type=int, default=200)
    a = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tokenizers import Tokenizer
    import make_tokenizer_refs as refs

    corpus = json.load(open(os.path.join(ROOT, "tests/data/tokenizer/corpus.json"), encoding="utf-8"))
    text = "".join(s + "\n" for s in corpus) * a.repeat
    nbytes = len(text.encode("utf-8"))

    hf = {"qwen3": Tokenizer.from_file(os.path.join(refs.find_qwen3(), "tokenizer.json"))}
    g = refs.find_smollm2(None)
    if g:
        hf["smollm2"] = refs.smollm2_from_gguf(g)[0]
    hf_res = {}
    for name, tk in hf.items():
        best, ntok = 1e9, 0
        for _ in range(5):
            t0 = time.perf_counter()
            ntok = len(tk.encode(text, add_special_tokens=False).ids)
            best = min(best, time.perf_counter() - t0)
        hf_res[name] = (ntok, best)

    exe = os.path.join(a.build, "tests", "test_tokenizer")
    out = subprocess.run([exe, "--gtest_also_run_disabled_tests", "--gtest_filter=*DISABLED_Bench*"],
                         env={**os.environ, "LMFUSE_BENCH_REPEAT": str(a.repeat)},
                         capture_output=True, text=True, check=True).stdout
    ok = True
    for m in re.finditer(r"lmfuse_bench tokenizer=(\S+) bytes=(\d+) tokens=(\d+) best_s=([\d.]+)", out):
        name, b, ntok, s = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))
        if name not in hf_res:
            continue
        hn, hs = hf_res[name]
        same = hn == ntok and b == nbytes
        ok &= same
        print(f"{name}: {nbytes / 1e6:.2f} MB, {ntok} tokens | HF tokenizers {nbytes / hs / 1e6:.2f} MB/s "
              f"| lmfuse {b / s / 1e6:.2f} MB/s | lmfuse/HF = {hs / s:.2f}x"
              + ("" if same else f"  (MISMATCH: HF {hn} tokens)"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
