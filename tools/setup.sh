#!/usr/bin/env bash
# Install what building and testing libcosyvoice needs on a Debian/Ubuntu machine:
# a C toolchain, pkg-config, libsamplerate, cmocka, numpy for the model tools (onnx, best effort,
# for the front-end ONNX files), the wetext wheel
# (only its grammar files are used: tools/convert.py packs them into model files and
# tests/test_text.c reads them; it is installed without its dependencies and never imported), Go
# for the cgo example (examples/go; the Rust example runs when cargo is present, rustup is not
# installed), the en_US.UTF-8 locale, under which `make test` checks that the build does not
# depend on the caller's locale (tests/check_env.sh), and clang + compiler-rt for the fuzz targets
# (tests/fuzz/), and, with --venv, a Python virtual environment for `make test-python`
# (build/venv, or $COSY_VENV; tools/python-test-requirements.txt: the cosyvoice package's, the
# speech server's and the Triton model's test dependencies, about 400 MB and three minutes to
# fetch, which is why the README's first command goes without it). The CUDA toolkit is optional
# (the Makefile builds the kernels when nvcc is on PATH and there is a GPU, or when asked).
#
#   bash tools/setup.sh          what `make`, `make demo` and `make test` need
#   bash tools/setup.sh --venv   the same, plus the virtual environment of `make test-python`
set -euo pipefail
WITH_VENV=0
for arg in "$@"; do
  case "$arg" in
    --venv) WITH_VENV=1 ;;
    *) echo "usage: bash tools/setup.sh [--venv]" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential pkg-config libsamplerate0-dev libcmocka-dev python3 python3-pip python3-venv \
  golang-go locales >/dev/null
# a locale whose collation differs from C's (it sorts '_' after letters); localedef works on both
# Debian and Ubuntu, and is skipped when the locale is already there
if ! locale -a 2>/dev/null | grep -qix 'en_US\.utf-\?8'; then
  $SUDO localedef -i en_US -c -f UTF-8 en_US.UTF-8
fi
# clang with compiler-rt (libFuzzer and the sanitizer runtimes) for `make fuzz` (tests/fuzz/).
# Debian 12 keeps compiler-rt in libclang-rt-dev, a mere recommendation of clang's packages, so it
# is named; where that package does not exist (Ubuntu 22.04), clang's dependencies carry it.
CLANG_RT=""
if apt-cache show libclang-rt-dev >/dev/null 2>&1; then CLANG_RT=libclang-rt-dev; fi
$SUDO apt-get install -y -qq --no-install-recommends clang $CLANG_RT >/dev/null
if ! python3 -c "import numpy" 2>/dev/null; then
  python3 -m pip install -q numpy || python3 -m pip install -q --break-system-packages numpy
fi
# onnx: only tools/convert.py's front-end ONNX path (speech_tokenizer_v3.onnx, campplus.onnx) and its
# test need it; best effort (the test says SKIP without it)
if ! python3 -c "import onnx" 2>/dev/null; then
  python3 -m pip install -q onnx 2>/dev/null || python3 -m pip install -q --break-system-packages onnx \
    2>/dev/null || echo "setup: note: could not install the onnx package (front-end ONNX conversion)"
fi
WETEXT=wetext==0.1.8   # docs/model-format.md section 9
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('wetext') is None)" 2>/dev/null; then
  python3 -m pip install -q --no-deps "$WETEXT" || python3 -m pip install -q --no-deps --break-system-packages "$WETEXT"
fi
# the virtual environment of `make test-python` (kept when it already has everything)
VENV="${COSY_VENV:-$ROOT/build/venv}"
VENV_CHECK="import numpy, pytest, httpx, fastapi, uvicorn, soundfile, tritonclient.grpc, pytriton, setuptools, wheel, mypy, onnx"
if [ "$WITH_VENV" = 0 ]; then
  if "$VENV/bin/python" -c "$VENV_CHECK" 2>/dev/null; then :; else
    VENV="none (bash tools/setup.sh --venv makes the one of make test-python)"; fi
elif ! "$VENV/bin/python" -c "$VENV_CHECK" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$ROOT/tools/python-test-requirements.txt"
  "$VENV/bin/python" -c "$VENV_CHECK"
fi
echo "setup: ok ($(gcc --version | head -1); $(clang --version | head -1);" \
  "numpy $(python3 -c 'import numpy; print(numpy.__version__)'); $(locale -a | grep -ix 'en_US\.utf-\?8');" \
  "venv $VENV)"
