#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-server, llama-quantize and llama-cli, a test-time
# reference to compare lmfuse against (scripts/peer_bench.sh, scripts/loadtest.py). Nothing of
# llama.cpp enters the repository: the source is the llama.cpp tree bundled in the PyPI sdist of
# llama-cpp-python (its vendor/llama.cpp), and everything lands in the git-ignored .deps/.
#
# Pinned: llama-cpp-python 0.3.36 (newest with an sdist when pinned), which carries
# llama.cpp ggml-org/llama.cpp@0c1e57098 (its CHANGELOG; ggml 0.25.3 per ggml/CMakeLists.txt).
# The sdist has no .git, so the binaries report build number 0 / commit "unknown".
#
#   scripts/build_llama_cpp.sh [-j N]          CPU build   -> .deps/llama.cpp/bin/
#   scripts/build_llama_cpp.sh --cuda [-j N]   CUDA build (sm_90) -> .deps/llama.cpp-cuda/bin/
#   scripts/build_llama_cpp.sh --download-only fetch the sdist into .deps/ and write the trimmed
#                                              source .deps/llama.cpp-src-<ver>.tar.gz
#   scripts/build_llama_cpp.sh --sdist FILE    build from FILE (the sdist or the trimmed tarball)
#                                              instead of downloading
#
# GPU machine (no network): here run `scripts/build_llama_cpp.sh --download-only`; the sdist
# (~75 MB, mostly test vocabularies) is over the device tool's 64 MiB carry limit, so carry the
# trimmed source (~10 MB) instead, e.g. carry [".deps/llama.cpp-src-0.3.36.tar.gz"] and run
#   scripts/build_llama_cpp.sh --cuda --sdist .deps/llama.cpp-src-0.3.36.tar.gz -j 16
# Without --sdist the script also looks for either file in .deps/ before trying the network.
#
# Idempotent: a build folder's stamp file (.deps/llama.cpp*/STAMP) records the pinned version and
# flags; when it matches and the binaries exist, the script only prints where they are.
# Cost: a CPU build is ~10 CPU-minutes (~5 min on 2 idle cores; 11 min wall measured on a shared
# 2-core machine at load 3-9). Flags: GGML_NATIVE=ON (tuned to this host's CPU;
# do not copy the CPU binaries to another machine), static libraries, no CURL/OpenSSL/web UI,
# Release, only the four targets.
set -euo pipefail

VERSION=0.3.36
LLAMA_COMMIT=0c1e57098
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
sdist_name="llama_cpp_python-$VERSION.tar.gz"
trimmed_name="llama.cpp-src-$VERSION.tar.gz"
targets=(llama-bench llama-server llama-quantize llama-cli)

cuda=0
jobs=$(nproc)
sdist=""
download_only=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=1 ;;
    -j) jobs=${2:?-j needs a number}; shift ;;
    -j*) jobs=${1#-j} ;;
    --sdist) sdist=${2:?--sdist needs a file}; shift ;;
    --download-only) download_only=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_llama_cpp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then echo "-j: expected a positive number, got '$jobs'" >&2; exit 2; fi

if [ "$cuda" = 1 ]; then
  bdir="$deps/llama.cpp-cuda"
  backend_flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
else
  bdir="$deps/llama.cpp"
  backend_flags=()
fi
cmake_flags=(
  -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
  "${backend_flags[@]}"
)
command -v ninja >/dev/null || cmake_flags=("${cmake_flags[@]:2}")  # fall back to Makefiles
stamp_want="llama-cpp-python $VERSION llama.cpp $LLAMA_COMMIT flags: ${cmake_flags[*]}"

print_bins() {
  echo "llama.cpp ($LLAMA_COMMIT, from llama-cpp-python $VERSION) binaries:"
  for t in "${targets[@]}"; do echo "  $bdir/bin/$t"; done
}

have_bins() {
  local t
  for t in "${targets[@]}"; do [ -x "$bdir/bin/$t" ] || return 1; done
}

if [ "$download_only" = 0 ] && have_bins && [ "$(cat "$bdir/STAMP" 2>/dev/null)" = "$stamp_want" ]; then
  echo "up to date (stamp $bdir/STAMP matches), nothing to do"
  print_bins
  exit 0
fi

mkdir -p "$deps"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Writes the trimmed source tarball: vendor/llama.cpp without the test vocabularies (models/),
# docs and media, which the build does not read.
make_trimmed() {  # SDIST OUT
  local base="llama_cpp_python-$VERSION/vendor/llama.cpp"
  mkdir -p "$tmp/trim"
  tar -C "$tmp/trim" -xzf "$1" \
    --exclude="$base/models" --exclude="$base/docs" --exclude="$base/media" "$base"
  tar -C "$tmp/trim/$base/.." -czf "$2.part" llama.cpp
  mv "$2.part" "$2"
  rm -rf "$tmp/trim"
}

fetch_sdist() {
  if [ -s "$deps/$sdist_name" ]; then return 0; fi
  echo "downloading llama-cpp-python==$VERSION sdist from PyPI..." >&2
  "${PYTHON:-python3}" -m pip download --quiet --no-deps --no-binary=:all: \
    "llama-cpp-python==$VERSION" -d "$tmp/dl" >&2
  [ -s "$tmp/dl/$sdist_name" ] || { echo "pip download did not produce $sdist_name" >&2; exit 1; }
  mv "$tmp/dl/$sdist_name" "$deps/$sdist_name"
}

if [ "$download_only" = 1 ]; then
  fetch_sdist
  [ -s "$deps/$trimmed_name" ] || make_trimmed "$deps/$sdist_name" "$deps/$trimmed_name"
  echo "sdist:          $deps/$sdist_name ($(du -h "$deps/$sdist_name" | cut -f1))"
  echo "trimmed source: $deps/$trimmed_name ($(du -h "$deps/$trimmed_name" | cut -f1)) <- carry this one"
  exit 0
fi

if [ -z "$sdist" ]; then
  if [ -s "$deps/$sdist_name" ]; then sdist="$deps/$sdist_name"
  elif [ -s "$deps/$trimmed_name" ]; then sdist="$deps/$trimmed_name"
  else fetch_sdist; sdist="$deps/$sdist_name"
  fi
fi
[ -s "$sdist" ] || { echo "--sdist: no such file '$sdist'" >&2; exit 1; }

# Unpack the source (sdist: llama_cpp_python-VER/vendor/llama.cpp; trimmed: llama.cpp) into
# .deps/llama.cpp-src-VER, shared by the CPU and the CUDA build.
src="$deps/llama.cpp-src-$VERSION"
if [ ! -f "$src/CMakeLists.txt" ] || [ "$(cat "$src/.from" 2>/dev/null)" != "$VERSION" ]; then
  echo "unpacking $sdist..." >&2
  first=$(tar -tzf "$sdist" 2>/dev/null | head -1 || true)  # head closes the pipe early
  rm -rf "$src" "$tmp/src" && mkdir -p "$tmp/src"
  case "$first" in
    llama_cpp_python-*)
      base="llama_cpp_python-$VERSION/vendor/llama.cpp"
      tar -tzf "$sdist" "$base/CMakeLists.txt" >/dev/null 2>&1 || {
        echo "$sdist: expected the llama-cpp-python $VERSION sdist (with $base), got another" >&2; exit 1; }
      tar -C "$tmp/src" -xzf "$sdist" --exclude="$base/models" --exclude="$base/docs" "$base"
      mv "$tmp/src/$base" "$src" ;;
    llama.cpp/*)
      tar -C "$tmp/src" -xzf "$sdist"
      mv "$tmp/src/llama.cpp" "$src" ;;
    *) echo "$sdist: expected the llama-cpp-python sdist or $trimmed_name, got an archive starting with '$first'" >&2; exit 1 ;;
  esac
  echo "$VERSION" > "$src/.from"
fi

echo "configuring $bdir (${cmake_flags[*]})" >&2
rm -f "$bdir/STAMP"
cmake -S "$src" -B "$bdir" "${cmake_flags[@]}" > "$bdir.configure.log" 2>&1 || {
  tail -30 "$bdir.configure.log" >&2; echo "configure failed, log: $bdir.configure.log" >&2; exit 1; }
echo "building ${targets[*]} with -j $jobs (CPU: ~10 CPU-minutes)..." >&2
start=$(date +%s)
cmake --build "$bdir" -j "$jobs" --target "${targets[@]}" > "$bdir.build.log" 2>&1 || {
  tail -40 "$bdir.build.log" >&2; echo "build failed, log: $bdir.build.log" >&2; exit 1; }
have_bins || { echo "build finished but binaries are missing in $bdir/bin" >&2; exit 1; }
echo "$stamp_want" > "$bdir/STAMP"
echo "built in $(( $(date +%s) - start )) s" >&2
print_bins
