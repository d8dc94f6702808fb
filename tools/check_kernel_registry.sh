#!/usr/bin/env bash
# check_kernel_registry.sh - fails when a cosy_k_* function declared in kernels/*.h is in no entry
# of the kernel registry (tests/kregistry.c), or when the registry names one that no header
# declares. A new launcher therefore needs a registry entry (and with it a test, or the name of
# the test that covers it, and a benchmark or the reason there is none) before CI passes.
#
#   bash tools/check_kernel_registry.sh     (from anywhere; `make check-kernels`, run by `make test`)
#
# Declarations: identifiers cosy_k_<name> followed by "(" in kernels/*.h (types such as
# cosy_k_ras_row are never followed by "("). Registry names: the quoted "cosy_k_<name>" strings
# of tests/kregistry.c. Needs no GPU and no build.
# It also fails when a kernel source tests __CUDA_ARCH__ other than as `>= N` or `< N` with N / 10
# one of the Makefile's CUDA_PTX_LEVELS: each target's machine code is compiled from the PTX of its
# level, so code that tells apart two targets of one level would be built for the wrong one.
set -u -o pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

declared=$(cat kernels/*.h | grep -oE '\bcosy_k_[A-Za-z0-9_]+[[:space:]]*\(' |
           sed -E 's/[[:space:]]*\($//' | sort -u)
listed=$(grep -oE '"cosy_k_[A-Za-z0-9_]+"' tests/kregistry.c | tr -d '"' | sort -u)
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$listed"))
unknown=$(comm -13 <(printf '%s\n' "$declared") <(printf '%s\n' "$listed"))
rc=0
if [ -n "$missing" ]; then
  echo "check-kernels: declared in kernels/*.h but in no entry of tests/kregistry.c:"
  printf '  %s\n' $missing
  rc=1
fi
if [ -n "$unknown" ]; then
  echo "check-kernels: named in tests/kregistry.c but declared in no kernels/*.h:"
  printf '  %s\n' $unknown
  rc=1
fi
levels=$(sed -nE 's/^CUDA_PTX_LEVELS := //p' Makefile)
[ -n "$levels" ] || { echo "check-kernels: no CUDA_PTX_LEVELS in the Makefile"; rc=1; }
allowed=$(for v in $levels; do printf '__CUDA_ARCH__ >= %s0\n__CUDA_ARCH__ < %s0\n' "$v" "$v"; done)
tests=$(grep -noE '__CUDA_ARCH__[[:space:]]*[<>=!]+[[:space:]]*[0-9]+' kernels/*.cu kernels/*.cuh \
          kernels/*.h 2>/dev/null)
bad=$(printf '%s\n' "$tests" | sed -E 's/[[:space:]]+/ /g; s/__ ?([<>=!]+) ?/__ \1 /' |
      while IFS= read -r t; do [ -z "$t" ] && continue
        printf '%s\n' "$allowed" | grep -qxF "${t#*:*:}" || echo "$t"; done)
if [ -n "$bad" ]; then
  echo "check-kernels: __CUDA_ARCH__ tests at levels the Makefile's CUDA_PTX_LEVELS ($levels) lacks:"
  printf "%s\n" "$bad" | sed "s/^/  /"
  rc=1
fi
[ $rc = 0 ] && echo "check-kernels: $(printf '%s\n' "$declared" | wc -l) launchers of kernels/*.h, all in the registry; __CUDA_ARCH__ tested at $(printf '%s\n' "$tests" | grep -c .) places, all at the levels $levels"
exit $rc
