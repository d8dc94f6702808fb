#!/usr/bin/env bash
# session 15 call e: the final tree: the standard W1 sweep (C = 1 with 16 requests; then
# --concurrency 4,16,32,48,64,128,256 on one engine; W2 = --offline 256), the batch-invariant LLM
# at C = 1 and 16,64, three more C = 16,64 runs of the default for the spread, and the device
# stress test (full-size model)
. "$(dirname "$0")/../../device_call.sh"
r c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
r scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
r w2 $B -m $F --device 0 --offline 256 $W
COSY_LLM_DECODE=tc r tc_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc r tc_64 $B -m $F --device 0 --concurrency 16,64 $W
for k in 1 2 3; do r c64_$k $B -m $F --device 0 --concurrency 16,64 $W; done
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
pack e
for n in c1 scale w2 tc_c1 tc_64 c64_1 c64_2 c64_3; do echo "== $n"; grep -hE "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|W2|offline|RTF|gpu util: mean" /tmp/l/$n.log | grep -v "^bench_w1" | cut -c1-120; done
echo "== stress"; grep -hE "PASSED|FAILED|heap from|device memory" /tmp/l/stress.log | head -6
