#!/usr/bin/env bash
# check_env.sh - the build and the tests do not depend on the caller's environment (docs/testing.md: "What
# the build and the tests take from the environment"). Run by `make test` (target test-env), which passes MAKE, B, CUDA, SHARED_DIR and
# TEST_MODEL; by hand: bash tests/check_env.sh (after `make test`).
#
# 1. Locale: `make check-abi` with LC_ALL and LANG set to a locale whose collation orders the
#    exported symbols differently from C (abi/cosyvoice.symbols is in C order): en_US.UTF-8 when
#    installed (tools/setup.sh installs it), else the first installed locale that does. SKIP when
#    no installed locale orders them differently.
# 2. Current directory: test binaries run from an empty temporary directory, with COSY_SHARED,
#    COSY_TEST_MODEL, COSY_TEST_FE_MODEL and COSY_TEST_FE_DATA unset and TMPDIR pointing there,
#    pass, skip no more than from the repository root, and leave no files behind.
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
B=${B:-build}
SHARED_DIR=${SHARED_DIR:-../shared}
TEST_MODEL=${TEST_MODEL:-$B/test/small-f32.gguf}
CWD_TESTS=${CWD_TESTS:-test_api test_audio test_ref_llm test_ref_frontend test_voice_audio}
fail=0

# ---- 1. locale
c_order=$(LC_ALL=C sort abi/cosyvoice.symbols)
loc=""
for l in en_US.UTF-8 $(locale -a 2>/dev/null); do
  case $l in C | C.* | POSIX) continue ;; esac
  if [ "$(LC_ALL=$l sort abi/cosyvoice.symbols 2>/dev/null)" != "$c_order" ]; then
    loc=$l
    break
  fi
done
if [ -z "$loc" ]; then
  echo "SKIP: check_env locale: no installed locale orders the exported symbols differently from C" \
    "(bash tools/setup.sh installs en_US.UTF-8)"
elif out=$(LC_ALL=$loc LANG=$loc "$MAKE" --no-print-directory B="$B" ${CUDA:+CUDA=$CUDA} check-abi 2>&1)
then
  echo "check_env locale: make check-abi passes under LC_ALL=$loc (which sorts the symbols otherwise)"
else
  printf '%s\n' "$out"
  echo "FAIL: check_env locale: make check-abi fails under LC_ALL=$loc"
  fail=1
fi

# ---- 2. current directory
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cosy-check-env-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for t in $CWD_TESTS; do
  exe=$PWD/$B/tests/$t
  # the SKIP lines from the repository root, as `make test-c` runs it, are the reference
  ref=$(COSY_SHARED=$SHARED_DIR COSY_TEST_MODEL=$TEST_MODEL "$exe" 2>&1 | grep SKIP || true)
  if ! out=$(cd "$tmp" && env -u COSY_SHARED -u COSY_TEST_MODEL -u COSY_TEST_FE_MODEL \
    -u COSY_TEST_FE_DATA TMPDIR="$tmp" "$exe" 2>&1); then
    printf '%s\n' "$out" | tail -20
    echo "FAIL: check_env cwd: $t fails when run from another directory"
    fail=1
  elif [ "$(grep SKIP <<<"$out" || true)" != "$ref" ]; then
    diff <(printf '%s\n' "$ref") <(grep SKIP <<<"$out") || true
    echo "FAIL: check_env cwd: $t skips other tests when run from another directory (> lines)"
    fail=1
  else
    n=$(grep -c '^\[  SKIPPED \] [a-z]' <<<"$ref" || true)
    echo "check_env cwd: $B/tests/$t passes from $tmp as from the root ($n skipped)"
  fi
done
leftover=$(find "$tmp" -mindepth 1 | head -5)
if [ -n "$leftover" ]; then
  echo "FAIL: check_env cwd: the tests left files in TMPDIR: $leftover"
  fail=1
fi
exit $fail
