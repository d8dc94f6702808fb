#!/usr/bin/env bash
# Install what building and testing libcosyvoice needs on a Debian/Ubuntu machine:
# a C toolchain, pkg-config, libsamplerate, cmocka, numpy for the model tools, and Go for the
# cgo example (examples/go; the Rust example runs when cargo is present, rustup is not installed).
# The CUDA toolkit is optional (kernels are built when nvcc is on PATH).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential pkg-config libsamplerate0-dev libcmocka-dev python3 python3-pip \
  golang-go >/dev/null
if ! python3 -c "import numpy" 2>/dev/null; then
  python3 -m pip install -q numpy || python3 -m pip install -q --break-system-packages numpy
fi
# onnx: only tools/convert.py's front-end ONNX path (speech_tokenizer_v3.onnx, campplus.onnx) and its
# test need it; best effort (the test says SKIP without it)
if ! python3 -c "import onnx" 2>/dev/null; then
  python3 -m pip install -q onnx 2>/dev/null || python3 -m pip install -q --break-system-packages onnx \
    2>/dev/null || echo "setup: note: could not install the onnx package (front-end ONNX conversion)"
fi
echo "setup: ok ($(gcc --version | head -1); numpy $(python3 -c 'import numpy; print(numpy.__version__)'))"
