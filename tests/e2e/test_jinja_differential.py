#!/usr/bin/env python3
"""The chat-template interpreter against transformers' Jinja environment on random templates
(scripts/jinja_differential.py, three fixed seeds): no silent mismatch, i.e. lmfuse never renders
text that differs from the reference's, nor renders where the reference raises. Prints SKIP and
exits 77 (ctest: skipped) where transformers cannot be imported.

Env: LMFUSE_SOURCE_DIR (repository root), JINJA_RENDER (the jinja_render tool).
"""
import os
import pathlib
import subprocess
import sys

SRC = pathlib.Path(os.environ.get("LMFUSE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
RENDER = os.environ.get("JINJA_RENDER", str(SRC / "build" / "tests" / "jinja_render"))
try:
    import jinja2  # noqa: F401  (transformers renders chat templates with it)
    import transformers.utils.chat_template_utils  # noqa: F401
except Exception as e:
    print(f"SKIP: transformers not importable ({e})")
    sys.exit(77)

rc = 0
for seed in (1, 2, 3):
    p = subprocess.run([sys.executable, str(SRC / "scripts" / "jinja_differential.py"), "--seed", str(seed), "-n", "1000",
                        "--render", RENDER], capture_output=True, text=True)
    print(p.stdout[-4000:])
    if p.returncode != 0:
        print(p.stderr[-2000:])
        rc = 1
sys.exit(rc)
