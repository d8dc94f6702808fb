#!/usr/bin/env bash
# session 14 call b: conv without the pipelined path (unpadded slab rows, TF32 strip one plane);
# the LLM's first-chunk pause no longer for a request alone; W1 tc (batch-invariant LLM) against
# the default, alternating; the tc sweep and W2
. "$(dirname "$0")/../../device_call.sh"
COSY_FULL_MODEL=$F r test_gpu_hift ./build/dev/tests/test_gpu_hift
for i in 1 2; do
  COSY_LLM_DECODE=tc r w1_tc_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  r w1_def_$i $B -m $F --device 0 --concurrency 1,16,64 $W
done
COSY_LLM_DECODE=tc r tc_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc r tc_scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
COSY_LLM_DECODE=tc r tc_w2 $B -m $F --device 0 --offline 256 $W
COSY_LLM_DECODE=tc r tc_c64_fresh $B -m $F --device 0 --concurrency 64 $W
COSY_LLM_DECODE=tc COSY_SCHED_PAUSE=3 r tc_c1_p3 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc COSY_SCHED_TRACE=$L/trace_tc_c64.txt r tc_c64_trace $B -m $F --device 0 --concurrency 64 $W
gzip -f $L/trace_tc_c64.txt 2>/dev/null
pack b
grep -hE "PASSED|FAILED" /tmp/l/test_gpu_hift.log
grep -h "TIMING gpu_hift_infer" /tmp/l/test_gpu_hift.log
for f in w1_tc_1 w1_def_1 w1_tc_2 w1_def_2 tc_c1 tc_scale tc_w2 tc_c64_fresh tc_c1_p3 tc_c64_trace; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|^ +256 +[0-9.]+ +2560|ttfb by wave" /tmp/l/$f.log | head -9; done
