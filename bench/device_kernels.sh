#!/usr/bin/env bash
# device_kernels.sh - build, check and time the CUDA kernels on a GPU machine, unattended.
#
#   bash bench/device_kernels.sh [NAME]     (from the repository root; ~1-2 minutes on an H100)
#
# 1. prints the machine (nvidia-smi, nvcc, the libraries the build needs);
# 2. builds build/tests/test_kernels (the kernel harness: the tests, and the benchmark with
#    --bench; tests/kharness.h) with the Makefile (make -j$JOBS, default the number of cores;
#    B=... overrides the build dir). If that build fails (the GPU machines have no libsamplerate
#    or cmocka, which the library and the cmocka tests need; or another part of the tree is
#    broken), it builds the program directly from this family's kernels/*.cu files (sm_90 only;
#    the test then uses its built-in cmocka stand-in) and says so;
# 3. runs the tests (one line per check, PASS/FAIL) and then the benchmark (test_kernels --bench,
#    table last). An argument (a family or launcher name of `test_kernels --list`) limits both.
# Logs are tee'd into $OUT when set (the device tool's output folder), else build/device-logs.
# Exit status: the test's (non-zero when a check failed), or the build's when nothing could be
# built.
set -u -o pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # C messages and '.' decimals in the logs, whatever the caller's locale

LOGDIR=${OUT:-build/device-logs}
mkdir -p "$LOGDIR"
B=${B:-build}
JOBS=${JOBS:-$(nproc)}
T0=$(date +%s)

{
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv 2>&1 || echo "nvidia-smi failed"
  command -v nvcc >/dev/null && nvcc --version | tail -2
  for h in cmocka.h samplerate.h; do
    if [ -e /usr/include/$h ] || [ -e /usr/local/include/$h ]; then echo "$h: present"
    else echo "$h: MISSING"; fi
  done
  ldconfig -p 2>/dev/null | grep -E "libcmocka|libsamplerate|libcublasLt\.so" | head -5
} 2>&1 | tee "$LOGDIR/machine.log"

FILTER=${1:-}
TEST=$B/tests/test_kernels
echo "== build (make -j$JOBS B=$B CUDA=1)"
if [ -z "${FORCE_DIRECT:-}" ] &&
   make -j"$JOBS" B="$B" CUDA=1 "$TEST" >"$LOGDIR/build.log" 2>&1; then
  echo "make: ok ($(( $(date +%s) - T0 )) s)"
else
  if [ -n "${FORCE_DIRECT:-}" ]; then echo "FORCE_DIRECT set: building the program directly"
  else
    echo "make FAILED (tail of $LOGDIR/build.log below); building the program directly"
    tail -25 "$LOGDIR/build.log"
  fi
  B=build/device-direct
  TEST=$B/test_kernels
  mkdir -p "$B"
  CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  CUDA_LIB=$CUDA_HOME/lib64
  [ -d "$CUDA_LIB" ] || CUDA_LIB=$CUDA_HOME/targets/x86_64-linux/lib
  ok=1
  KFILES="act attention embed gemm norm rope sample gemv paged_kv bf16_split dit_elementwise conv_pos euler flow_pack device" # what test_kernels (tests and --bench) links
  for k in $KFILES; do
    f=kernels/$k.cu
    o=$B/$k.o
    nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC -Iinclude -Ilib \
      -Ikernels --expt-relaxed-constexpr -c "$f" -o "$o" >>"$LOGDIR/build.log" 2>&1 &
  done
  wait
  for k in $KFILES; do [ -e "$B/$k.o" ] || ok=0; done
  CF="-std=c11 -O2 -DCOSY_WITH_CUDA=1 -I$CUDA_HOME/include -Iinclude -Ilib -Ikernels -Itests"
  LF="-L$CUDA_LIB -Wl,-rpath,$CUDA_LIB -lcublasLt -lcublas -lcudart -lstdc++ -lm -lpthread"
  if [ $ok = 1 ]; then
    OBJS=$(for k in $KFILES; do printf '%s ' "$B/$k.o"; done)
    # without cmocka.h the test uses its built-in stand-in (tests/test_kernels.c)
    CMOCKA=-lcmocka
    echo '#include <cmocka.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1 || CMOCKA=
    ${CC:-cc} $CF -o "$TEST" tests/test_kernels.c tests/kharness.c tests/kregistry.c \
      bench/bench_kernels.c $OBJS $CMOCKA $LF >>"$LOGDIR/build.log" 2>&1 || ok=0
  fi
  if [ $ok = 0 ] && [ ! -x "$TEST" ]; then
    echo "direct build FAILED too:"; tail -25 "$LOGDIR/build.log"; exit 2
  fi
  echo "direct build done ($(( $(date +%s) - T0 )) s)"
fi

rc_test=3
if [ -x "$TEST" ]; then
  echo "== tests ($TEST)"
  "$TEST" $FILTER 2>&1 | tee "$LOGDIR/test_kernels.log"
  rc_test=${PIPESTATUS[0]}
  echo "test_kernels exit status: $rc_test"
else
  echo "test_kernels was not built"
fi

rc_bench=3
if [ -x "$TEST" ]; then
  echo "== benchmark ($TEST --bench $FILTER)"
  "$TEST" --bench $FILTER >"$LOGDIR/bench_kernels.log" 2>&1
  rc_bench=$?
  # the progress lines are in the log; show the summary table (it comes last)
  if grep -q '^==== kernel table' "$LOGDIR/bench_kernels.log"; then
    sed -n '/^device:/p;/^ceilings:/p' "$LOGDIR/bench_kernels.log"
    sed -n '/^==== kernel table/,$p' "$LOGDIR/bench_kernels.log"
  else
    tail -8 "$LOGDIR/bench_kernels.log"
  fi
  echo "bench_kernels exit status: $rc_bench"
fi

npass=$(grep -c ' PASS' "$LOGDIR/test_kernels.log" 2>/dev/null || true)
nfail=$(grep -c ' FAIL' "$LOGDIR/test_kernels.log" 2>/dev/null || true)
echo "== summary: tests exit $rc_test, ${npass:-0} checks passed, ${nfail:-0} failed;" \
     "bench exit $rc_bench; $(( $(date +%s) - T0 )) s"
grep ' FAIL' "$LOGDIR/test_kernels.log" 2>/dev/null | head -20
exit $rc_test
