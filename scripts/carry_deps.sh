#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann-json) into .deps/include (git-ignored),
# so the GPU machine, which can install nothing, builds with them: name ".deps" in the device
# tool's carry list. CMake finds them there when the system has none.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/include"
cp -r /usr/include/CLI "$root/.deps/include/"
cp -r /usr/include/nlohmann "$root/.deps/include/"
# The Qwen3 tokenizer for `lmfuse random-model` there (../shared is not on the GPU machine).
if [ -d "$root/../shared/models/qwen3-tokenizer" ]; then
  mkdir -p "$root/.deps/qwen3-tokenizer"
  cp "$root/../shared/models/qwen3-tokenizer/"tokenizer*.json "$root/.deps/qwen3-tokenizer/"
fi
du -sh "$root/.deps"
