#!/usr/bin/env python3
"""The tokenizer.json loader against Hugging Face `tokenizers` on random BPE tokenizers
(scripts/tokenizer_differential.py, three fixed seeds): lmfuse loads every file `tokenizers`
loads and gives the same ids and decoded text. Exits 77 (ctest SKIP_RETURN_CODE) with
"SKIP: reason" where `tokenizers` cannot be imported.

Env: LMFUSE_SOURCE_DIR (repository root), TOKENIZER_BATCH (tests/tools/tokenizer_batch), else
LMFUSE_BIN (the lmfuse binary; slower, one process per request, so fewer cases).
"""
import os
import pathlib
import subprocess
import sys

SRC = pathlib.Path(os.environ.get("LMFUSE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
try:
    import tokenizers  # noqa: F401
    from tokenizers import trainers  # noqa: F401
except Exception as e:  # noqa: BLE001
    print(f"SKIP: tokenizers not importable ({e})")
    sys.exit(77)

batch = os.environ.get("TOKENIZER_BATCH", "")
if not batch:
    for cand in (SRC / "build" / "tests" / "tokenizer_batch", pathlib.Path(os.environ.get("LMFUSE_BIN", "x")).parent / "tests" / "tokenizer_batch"):
        if cand.exists():
            batch = str(cand)
            break
lmfuse = os.environ.get("LMFUSE_BIN", str(SRC / "build" / "lmfuse"))
if batch:
    tool, n, texts = ["--batch", batch], "150", "25"
elif pathlib.Path(lmfuse).exists():
    tool, n, texts = ["--lmfuse", lmfuse], "12", "8"
else:
    print(f"SKIP: neither tests/tools/tokenizer_batch nor lmfuse ({lmfuse}) found")
    sys.exit(77)

rc = 0
for seed in (1, 2, 3):
    p = subprocess.run([sys.executable, str(SRC / "scripts" / "tokenizer_differential.py"), "--seed", str(seed),
                        "-n", n, "--texts", texts] + tool, capture_output=True, text=True,
                       env={**os.environ, "PYTHONHASHSEED": "0", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})  # one seed, one set of files
    print(p.stdout[-4000:])
    if p.returncode != 0:
        print(p.stderr[-2000:])
        rc = 1
sys.exit(rc)
