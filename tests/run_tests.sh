#!/usr/bin/env bash
# run_tests.sh - runs the C test binaries for `make test-c`, JOBS at a time.
#
#   bash tests/run_tests.sh JOBS LOGDIR TEST...     (the environment is the tests': COSY_SHARED ...)
#
# JOBS 1: one after another, each one's output as it comes after a "== TEST" line (as the
# Makefile's loop did). JOBS > 1 (the sanitizer stages, whose binaries run 5-20x slower and mostly
# on one core): up to JOBS binaries at once, each one's output kept in LOGDIR/NAME.log and printed
# whole, under its "== TEST (N s)" line, when it ends, so that outputs never interleave. Every
# test runs whatever fails before it; the exit status is 1 when any failed (they are named last).
# The tests' temporary files carry their process id (tests/testutil.c tu_tmp_path), so two
# binaries at once never share one.
set -u
jobs=$1 logs=$2
shift 2
failed=()
exe() { case $1 in /*) "$1" ;; *) ./"$1" ;; esac; } # a path from here, or an absolute one
if [ "$jobs" -le 1 ]; then
  for t in "$@"; do
    echo "== $t"
    exe "$t" || failed+=("$t")
  done
else
  mkdir -p "$logs"
  rm -f "$logs"/*.log "$logs"/*.failed
  run_one() {
    local t=$1 l s rc
    l=$logs/$(basename "$t").log
    s=$(date +%s)
    exe "$t" > "$l" 2>&1
    rc=$?
    [ $rc = 0 ] || echo "$rc" > "${l%.log}.failed"
    # one test's block at a time on stdout (flock: the blocks of two tests never interleave)
    { echo "== $t ($(($(date +%s) - s)) s)"; cat "$l"; [ $rc = 0 ] || echo "== $t: exit $rc"; } |
      flock "$logs/.lock" cat
  }
  running=0
  for t in "$@"; do
    if [ $running -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
    run_one "$t" &
    running=$((running + 1))
  done
  while [ $running -gt 0 ]; do
    wait -n
    running=$((running - 1))
  done
  for t in "$@"; do
    [ -f "$logs/$(basename "$t").failed" ] && failed+=("$t")
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "SOME C TESTS FAILED: ${failed[*]}"
  exit 1
fi
