#!/usr/bin/env bash
# session 14 call e: the LLM pause unless it risks an underrun (COSY_SCHED_PAUSE=1, new default)
# against the unconditional pause (=3), C = 64 on fresh engines, alternating; tc mode with it;
# the sweep and W2 with the final defaults
. "$(dirname "$0")/../../device_call.sh"
for i in 1 2 3; do
  r c64_p1_$i $B -m $F --device 0 --concurrency 64 $W
  COSY_SCHED_PAUSE=3 r c64_p3_$i $B -m $F --device 0 --concurrency 64 $W
  COSY_LLM_DECODE=tc r tc64_p1_$i $B -m $F --device 0 --concurrency 64 $W
done
r c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
r scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
r w2 $B -m $F --device 0 --offline 256 $W
COSY_LLM_DECODE=tc r tc_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc r tc_scale $B -m $F --device 0 --concurrency 16,32,48,64 $W
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
pack e
for f in c64_p1_1 c64_p3_1 tc64_p1_1 c64_p1_2 c64_p3_2 tc64_p1_2 c64_p1_3 c64_p3_3 tc64_p1_3 c1 scale w2 tc_c1 tc_scale; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|^ +256 +[0-9.]+ +2560|ttfb by wave" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$7,$8, $10,$11,$12,$13,$14,$15,$16,$17,$18,$19}' | head -14; done
grep -hE "PASSED|FAILED" /tmp/l/test_gpu_engine_full.log
