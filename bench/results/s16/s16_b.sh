#!/usr/bin/env bash
# session 16 call b: why gemv_tc_wide_kernel was slow in call a (decode step at 64 rows 3.4-4.1 ms
# against 2.05): the kernel table at b64 now runs it (smem_max passed, as the LLM does), per
# variant: the 32-row kernel (WIDE=0), wide with clusters of up to 8 / none, TW 1 / 2; ncu
# sections of gate|up and down at b64 (wide, clusters, TW 1; and the 32-row kernel); decode
# steps (test_gpu_llm, full model) for the two cluster choices
. "$(dirname "$0")/../../device_call.sh"
r tk_gemv timeout 90 ./build/dev/tests/test_kernels llm_gemv
V="w0:COSY_GEMV_TC_WIDE=0 c8t1:COSY_GEMV_TC_WIDE_TW=1 c1t1:COSY_GEMV_TC_WIDE_TW=1,COSY_GEMV_TC_WIDE_CS=1 c8t2:X=1 c1t2:COSY_GEMV_TC_WIDE_CS=1"
for v in $V; do
  n=${v%%:*}; e=${v#*:}
  BENCH_FILTER="b64 gemv_tc" r bench_$n env ${e//,/ } timeout 60 ./build/dev/tests/test_kernels --bench llm_gemv
done
NCU="ncu --kernel-name regex:gemv_tc_wide|gemv_tc_kernel --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats"
for op in gate down; do
  BENCH_FILTER="b64 gemv_tc rmsnorm+$op" r ncu_${op}_c8t1 env COSY_GEMV_TC_WIDE_TW=1 timeout 100 $NCU ./build/dev/tests/test_kernels --bench llm_gemv
  BENCH_FILTER="b64 gemv_tc $op" r ncu_${op}_c8t1b env COSY_GEMV_TC_WIDE_TW=1 timeout 100 $NCU ./build/dev/tests/test_kernels --bench llm_gemv
  BENCH_FILTER="b64 gemv_tc rmsnorm+$op" r ncu_${op}_w0 env COSY_GEMV_TC_WIDE=0 timeout 100 $NCU ./build/dev/tests/test_kernels --bench llm_gemv
done
for v in c8t1:COSY_GEMV_TC_WIDE_TW=1 c1t1:COSY_GEMV_TC_WIDE_TW=1,COSY_GEMV_TC_WIDE_CS=1 w0:COSY_GEMV_TC_WIDE=0; do
  n=${v%%:*}; e=${v#*:}
  r llm_$n env ${e//,/ } COSY_FULL_MODEL=$F timeout 90 ./build/dev/tests/test_gpu_llm
done
pack b
grep -hE "PASSED|FAILED" /tmp/l/tk_gemv.log
for v in $V; do n=${v%%:*}; echo "== $n"; grep -h "^llm b64  gemv_tc" /tmp/l/bench_$n.log | tail -5 | cut -c1-90; done
for f in /tmp/l/ncu_*.log; do echo "== $f"; grep -E "gemv_tc|Duration|Registers Per|Achieved Occupancy|Theoretical Occ|Dynamic Shared|Static Shared|Compute \(SM\) Thr|Memory Thr|L1/TEX Hit|Stall|Warp Cycles Per Issued|Cluster" $f | head -24 | cut -c1-120; done
for n in c8t1 c1t1 w0; do echo "== $n"; grep -h "TIMING llm decode step" /tmp/l/llm_$n.log | grep "tensor-core" | cut -c1-60; done
