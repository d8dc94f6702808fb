#!/usr/bin/env bash
# session 14 call c: the token-to-wave deferral (COSY_SCHED_DEFER, default 1.0 s) against none,
# in both LLM modes, alternating, three rounds; sweeps and W2 with the deferral; engine tests
. "$(dirname "$0")/../../device_call.sh"
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
for i in 1 2 3; do
  COSY_LLM_DECODE=tc r tc_d_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  COSY_LLM_DECODE=tc COSY_SCHED_DEFER=0 r tc_n_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  r def_d_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  COSY_SCHED_DEFER=0 r def_n_$i $B -m $F --device 0 --concurrency 1,16,64 $W
done
COSY_LLM_DECODE=tc COSY_SCHED_TRACE=$L/trace_tc_d_c64.txt r tc_d_trace $B -m $F --device 0 --concurrency 64 $W
gzip -f $L/trace_tc_d_c64.txt 2>/dev/null
COSY_LLM_DECODE=tc r tc_scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
r def_scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
COSY_LLM_DECODE=tc r tc_w2 $B -m $F --device 0 --offline 256 $W
r def_w2 $B -m $F --device 0 --offline 256 $W
pack c
grep -hE "PASSED|FAILED" /tmp/l/test_gpu_engine_full.log
for f in tc_d_1 tc_n_1 def_d_1 def_n_1 tc_d_2 tc_n_2 def_d_2 def_n_2 tc_d_3 tc_n_3 def_d_3 def_n_3 tc_d_trace tc_scale def_scale tc_w2 def_w2; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|^ +256 +[0-9.]+ +2560" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$7,$8}' | head -9; done
