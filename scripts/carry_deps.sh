#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann-json) into .deps/include (git-ignored),
# so the GPU machine, which can install nothing, builds with them: name ".deps" in the device
# tool's carry list. CMake finds them there when the system has none.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/include"
cp -r /usr/include/CLI "$root/.deps/include/"
cp -r /usr/include/nlohmann "$root/.deps/include/"
du -sh "$root/.deps"
