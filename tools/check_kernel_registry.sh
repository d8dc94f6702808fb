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
[ $rc = 0 ] && echo "check-kernels: $(printf '%s\n' "$declared" | wc -l) launchers of kernels/*.h, all in the registry"
exit $rc
