#!/usr/bin/env python3
"""A prompt that spans several backend runs (lmfuse logits --ubatch-size N) gives the same logits as
one run, on the CPU backend: bit for bit (its matmuls are bit-identical for any number of rows).
The CUDA counterpart is in scripts/check_models.py (rel-L2 <= 1e-3, GPU machine)."""
import os, subprocess, sys, tempfile

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
GOLD = os.path.join(SRC, "tests", "data", "golden")


def logits(model, toks, *extra):
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        out = f.name
    r = subprocess.run([EXE, "logits", "-m", model, "--device", "cpu", "--tokens", ",".join(map(str, toks)), "--all",
                        "-o", out, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    data = open(out, "rb").read()
    os.unlink(out)
    return data


def main():
    failures = 0
    toks = [(i * 37 + 11) % 250 for i in range(29)]
    for name in ("qwen3-tiny-q4_0.gguf", "llama-tiny-q8_0.gguf", "qwen2-tiny-f16.gguf"):
        model = os.path.join(GOLD, name)
        one = logits(model, toks)
        for ub in ("1", "7", "16"):
            same = logits(model, toks, "-ub", ub) == one
            print(("PASS " if same else "FAIL ") + f"{name}: chunks of {ub} == one run")
            failures += not same
    r = subprocess.run([EXE, "logits", "-m", os.path.join(GOLD, "qwen3-tiny-q4_0.gguf"), "--tokens", "1,2", "-o",
                        os.devnull, "-ub", "0"], capture_output=True, text=True)
    ok = r.returncode != 0 and "ubatch" in r.stderr
    print(("PASS " if ok else "FAIL ") + "--ubatch-size 0 is a clear error: " + r.stderr.strip())
    failures += not ok
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
