#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann-json) into .deps/include (git-ignored),
# so the GPU machine, which can install nothing, builds with them: name ".deps/include" in the
# device tool's carry list. CMake finds them there when the system has none.
# It also puts the single-header form of cpp-httplib 0.11.4 (Debian 12's version; Debian ships
# it split into a header and a shared library, which the GPU machine lacks) into
# .deps/include/httplib-header/httplib.h, from Debian's source archive, so a GPU build has
# `lmfuse serve`: deps_check.cmake takes it when pkg-config finds no cpp-httplib.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/include"
cp -r /usr/include/CLI "$root/.deps/include/"
cp -r /usr/include/nlohmann "$root/.deps/include/"
h="$root/.deps/include/httplib-header/httplib.h"
if [ ! -s "$h" ]; then
  url=http://deb.debian.org/debian/pool/main/c/cpp-httplib/cpp-httplib_0.11.4+ds.orig.tar.xz
  tmp=$(mktemp -d)
  curl -sSfL "$url" -o "$tmp/src.tar.xz"
  tar -C "$tmp" -xJf "$tmp/src.tar.xz" --wildcards '*/httplib.h' '*/LICENSE'
  mkdir -p "$(dirname "$h")"
  cp "$tmp"/*/httplib.h "$h" && cp "$tmp"/*/LICENSE "$(dirname "$h")/LICENSE"
  rm -rf "$tmp"
  grep -q 'CPPHTTPLIB_VERSION "0.11.4"' "$h" || { echo "carry_deps: $url did not hold httplib 0.11.4" >&2; exit 1; }
fi
du -sh "$root/.deps/include"
