# bench/device_call.sh - the shared preamble of a one-off device script (sourced, not run). A
# measurement worth repeating is a named step of bench/device_run.sh instead; a one-off script
# stays out of the repository (e.g. .dev/scratch/NAME.sh, carried to the device), and what it
# measured goes into bench/RESULTS.md or bench/HISTORY.md with its logs (bench/RESULTS.md, "How
# to add results"):
#
#   #!/usr/bin/env bash
#   . "$(dirname "$0")/../../bench/device_call.sh"   # from .dev/scratch/<script>.sh
#   r w1 $B -m $F --device 0 --concurrency 1,16,64 $W
#   pack x                                      # $OUT/logs_x.tgz, unpacked again under /tmp/l
#
# It builds with bench/device_run.sh (logs under $L/build), then gives: L (the log folder under
# $OUT), F (the full-size random model device_run.sh makes), B (bench_w1), W (the W1 texts and
# prompt), the test environment (COSY_TEST_MODEL, COSY_SHARED, LD_LIBRARY_PATH for the carried
# libraries), left (seconds left of LIMIT, default 570) and r NAME CMD... (runs CMD with its output
# in $L/NAME.log and prints "NAME rc=.. Ns"; skipped when less than 25 s are left); kernel_time_so
# (builds build/dev/kernel_time.so, bench/kernel_time.c, for LD_PRELOAD); base_tree SRC:DST ...
# and base_wait (the tree before, built beside this one: BB, its bench_w1); ab "V" ROUNDS and
# ab_rows "V" ROUNDS (W1 --concurrency 16,64 and a fresh C = 64 under each variant of V, in
# alternation, and their C = 64 rows after pack); ncu1 REGEX COUNT SKIP CMD... and ncu_show NAME
# (one kernel under ncu --set full with the stall reasons, and the lines that matter of its log):
#
#   BENCH_FILTER="llm b64 gemv_tcb rmsnorm+gate" \
#     r ncu_tcb ncu1 'gemv_tcb_kernel<\(int\)2, \(int\)4,' 1 3 ./build/dev/tests/test_kernels --bench llm_gemv
#   ncu_show ncu_tcb
#
# ncu matches REGEX against the demangled name as it lists them: "<unnamed>::" for the anonymous
# namespace, template arguments as "(int)4" and "(bool)0".
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
O=${OUT:-build/dev/out}
L=$O/l
mkdir -p "$L"
T0=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) )); }
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  OUT=$L/build bash bench/device_run.sh build > "$L/build.txt" 2>&1
  grep -E "rc=" "$L/build/summary.txt"
fi
export LD_LIBRARY_PATH=$PWD/.dev/root/usr/lib/x86_64-linux-gnu
export COSY_TEST_MODEL=$PWD/build/dev/test/small-f32.gguf COSY_SHARED=$PWD/.dev/shared
F=$PWD/build/dev/full-bf16.gguf
W="--texts .dev/shared/bench/w1_texts.txt --prompt-wav .dev/shared/audio/zero_shot_prompt.wav"
B=./build/dev/bench/bench_w1
r() {
  local n=$1
  shift
  if [ "$(left)" -lt 25 ]; then echo "skip $n"; return; fi
  local t=$(date +%s)
  "$@" > "$L/$n.log" 2>&1
  echo "$n rc=$? $(( $(date +%s) - t ))s"
}
# build/dev/kernel_time.so (bench/kernel_time.c, CUPTI), as bench/device_run.sh's kernel_time_so
kernel_time_so() {
  local cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  local inc=$cuda/include lib=$cuda/lib64
  [ -f "$inc/cupti.h" ] || inc=$cuda/extras/CUPTI/include
  [ -e "$lib/libcupti.so" ] || lib=$cuda/extras/CUPTI/lib64
  cc -shared -fPIC -O2 -I"$inc" -o build/dev/kernel_time.so bench/kernel_time.c -L"$lib" \
    -Wl,-rpath,"$lib" -lcupti
}
# ab "name:ENV=v,ENV2=v ..." ROUNDS: per round and variant, W1 --concurrency 16,64 (log NAME_k)
# and C = 64 on a fresh engine (NAME_fresh_k); ab_rows the same arguments: their C = 64 rows
ab() {
  local v n envs k
  for k in $(seq "$2"); do
    for v in $1; do
      n=${v%%:*}; envs=${v#*:}
      r ${n}_$k env ${envs//,/ } $B -m $F --device 0 --concurrency 16,64 $W
      r ${n}_fresh_$k env ${envs//,/ } $B -m $F --device 0 --concurrency 64 $W
    done
  done
}
ab_rows() {
  local v n k m
  for v in $1; do
    n=${v%%:*}; echo "== $n"
    for k in $(seq "$2"); do for m in ${n}_$k ${n}_fresh_$k; do
      printf "%-12s " $m; grep -hE "^ +64 +128" /tmp/l/$m.log | cut -c1-104 | tr -s ' ' | tr '\n' ' '
      grep -h "first 64 requests" /tmp/l/$m.log | sed 's/.*first 64 requests/ w1/; s/later 64/w2/' | tr -d '\n'
      echo
    done; done
  done
}
# base_tree SRC:DST ...: the tree before, built beside this one for an A/B in one call: a copy of
# this tree (with build/dev, so only what differs is rebuilt) in /tmp/base with each SRC (a file
# carried in .dev, e.g. main's version of a changed file) copied over DST, then `make lib`,
# bench_w1 and test_kernels there in the background (log $L/base_build.log). Sets BB (its
# bench_w1) and BPID; `base_wait` waits for it and prints its status. Call it after the build, so
# that the copy holds this tree's objects and build/dev/config.mk (its CUDA targets).
# A change that must keep the audio's bits: run both bench_w1 with --hash (the same workload)
# and compare their "audio bits" lines.
base_tree() {
  local m
  rm -rf /tmp/base && mkdir -p /tmp/base && cp -a . /tmp/base/ 2>/dev/null
  for m in "$@"; do cp "${m%%:*}" "/tmp/base/${m#*:}" || return 1; done
  (R=$PWD/.dev/root
   export CPATH=$R/usr/include LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu
   cd /tmp/base && nice make -j"${JOBS:-8}" B=build/dev SHARED_DIR="$PWD/.dev/shared" lib \
     build/dev/bench/bench_w1 build/dev/tests/test_kernels) > "$L/base_build.log" 2>&1 &
  BPID=$!
  BB=/tmp/base/build/dev/bench/bench_w1
}
base_wait() { wait "$BPID"; echo "base build rc=$?"; }
# the W1 result rows of a log
rows() { grep -hE "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|ttfb by wave|underruns:" "$@" | cut -c1-150; }
pack() {
  (cd "$O" && tar czf "logs_$1.tgz" l && rm -rf l)
  rm -rf /tmp/l
  tar xzf "$O/logs_$1.tgz" -C /tmp 2>/dev/null
}
# ncu1 REGEX COUNT SKIP CMD...: COUNT launches of the kernels whose demangled name matches REGEX,
# after SKIP of them, profiled with --set full and the stall reasons (150 s at most)
ncu1() {
  timeout 150 ncu --kernel-name-base demangled --kernel-name "regex:$1" --launch-skip "$3" \
    --launch-count "$2" --set full \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' "${@:4}"
}
# ncu_show NAME [LINES]: each profiled kernel's duration, throughputs, issue, occupancy and
# resources, then the largest stall reasons (cycles a warp waits per issued instruction)
ncu_show() {
  grep -E "^  [^ ].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Block Limit (Reg|Shared)|Grid Size|Dynamic Shared" \
    "$L/$1.log" | cut -c1-120 | head -"${2:-16}"
  grep -E "issue_stalled" "$L/$1.log" | awk '{print $1, $NF}' |
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k2 -g -r |
    head -8 | paste -sd' '
}
