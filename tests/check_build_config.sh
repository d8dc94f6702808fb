#!/usr/bin/env bash
# The build's first choice and how it is kept (Makefile, "the build's configuration"): `make -n`
# (nothing is compiled) in fresh build folders under $TMPDIR, with a stand-in nvidia-smi on PATH
# that lists a GPU of compute capability 9.0, or none ("No devices were found", as the real one
# says on a machine with a driver and no GPU), and with nvcc present or not (NVCC=). Checks:
#   nvcc + no GPU       CUDA=0, one line saying so and how to build the kernels anyway
#   no nvcc             CUDA=0
#   nvcc + GPU          CUDA=1 CUDA_ARCHS=native: sm_90 only
#   later calls         read $(B)/config.mk (no line, same choice), CUDA=1 / CUDA_ARCHS=all on
#                       the command line win and are written back; CUDA_ARCHS=all builds every
#                       target of CUDA_ARCH_LIST (given here, so any nvcc qualifies)
# Run by `make test` (target check-build-config). Needs nvcc on PATH for the CUDA cases (SKIP
# lines without it).
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
# nothing of a calling make's settings (`make test CUDA_ARCHS=all` passes it in MAKEFLAGS)
unset MAKEFLAGS MAKEOVERRIDES MFLAGS CUDA CUDA_ARCHS CUDA_ARCH_LIST NVCC B
T=$(mktemp -d "${TMPDIR:-/tmp}/cosy-build-config.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/gpu" "$T/nogpu"
printf '#!/bin/sh\necho 9.0\n' > "$T/gpu/nvidia-smi"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$T/nogpu/nvidia-smi"
chmod +x "$T/gpu/nvidia-smi" "$T/nogpu/nvidia-smi"
fails=0
check() { # description, condition (a command)
  if "${@:2}"; then echo "check-build-config: ok: $1"; else echo "check-build-config: FAIL: $1"; fails=$((fails + 1)); fi
}
dry() { # PATH prefix dir, build folder, make arguments...: the dry run's output
  local dir=$1 b=$2
  shift 2
  PATH="$dir:$PATH" "$MAKE" --no-print-directory -n B="$b" "$@" lib 2>&1
}
conf() { grep -E "^CONFIG_$2 := " "$1/config.mk" | sed "s/^CONFIG_$2 := //"; }

out=$(dry "$T/nogpu" "$T/b1" NVCC=)
check "no nvcc: CUDA=0" [ "$(conf "$T/b1" CUDA)" = 0 ]
check "no nvcc: no kernel compiled" eval '! grep -q "\[nvcc" <<< "$out"'

if ! command -v nvcc >/dev/null; then
  echo "check-build-config: SKIP: the nvcc cases (no nvcc on PATH)"
else
  out=$(dry "$T/nogpu" "$T/b2")
  check "nvcc, no GPU: CUDA=0" [ "$(conf "$T/b2" CUDA)" = 0 ]
  check "nvcc, no GPU: one line says so and names make CUDA=1" \
    eval '[ "$(grep -c "no GPU found.*make CUDA=1" <<< "$out")" = 1 ]'
  check "nvcc, no GPU: no kernel compiled" eval '! grep -q "\[nvcc" <<< "$out"'
  out=$(dry "$T/nogpu" "$T/b2")
  check "nvcc, no GPU, second call: the same choice, no line" \
    eval '[ "$(conf "$T/b2" CUDA)" = 0 ] && ! grep -q "no GPU found" <<< "$out"'
  out=$(dry "$T/nogpu" "$T/b2" CUDA=1 CUDA_ARCH_LIST="80 90")
  check "CUDA=1 without a GPU: every target, written back" \
    eval '[ "$(conf "$T/b2" CUDA)" = 1 ] && [ "$(conf "$T/b2" CUDA_ARCHS)" = all ] &&
          grep -q "code=sm_80" <<< "$out" && grep -q "code=sm_90" <<< "$out"'
  out=$(dry "$T/nogpu" "$T/b2" CUDA_ARCH_LIST="80 90")
  check "CUDA=1 kept for the next call" eval '[ "$(conf "$T/b2" CUDA)" = 1 ] && grep -q "\[nvcc 1/" <<< "$out"'
  out=$(dry "$T/nogpu" "$T/b2" CUDA=0)
  check "CUDA=0 on the command line wins" eval '[ "$(conf "$T/b2" CUDA)" = 0 ] && ! grep -q "\[nvcc" <<< "$out"'

  out=$(dry "$T/gpu" "$T/b3")
  check "nvcc + GPU: CUDA=1 CUDA_ARCHS=native" \
    eval '[ "$(conf "$T/b3" CUDA)" = 1 ] && [ "$(conf "$T/b3" CUDA_ARCHS)" = native ]'
  check "nvcc + GPU: sm_90 only" \
    eval 'grep -q "code=sm_90" <<< "$out" && ! grep -q "code=sm_80" <<< "$out"'
  check "nvcc + GPU: a line names the GPU and CUDA_ARCHS=all" \
    eval 'grep -q "GPU sm_90 found.*CUDA_ARCHS=all" <<< "$out"'
  out=$(dry "$T/gpu" "$T/b3" CUDA_ARCHS=all CUDA_ARCH_LIST="80 90")
  check "CUDA_ARCHS=all on the command line: every target, written back" \
    eval '[ "$(conf "$T/b3" CUDA_ARCHS)" = all ] && grep -q "code=sm_80" <<< "$out"'
  out=$(dry "$T/gpu" "$T/b4" CUDA_ARCHS=86)
  check "CUDA_ARCHS=86 alone implies CUDA=1" \
    eval '[ "$(conf "$T/b4" CUDA)" = 1 ] && grep -q "code=sm_86" <<< "$out" && ! grep -q "code=sm_90" <<< "$out"'
fi
[ $fails = 0 ] || { echo "check-build-config: $fails FAILED"; exit 1; }
echo "check-build-config: ok"
