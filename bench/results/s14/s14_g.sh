#!/usr/bin/env bash
# session 14 call g: the final tree: test_gpu_engine (full and small model) with every request of
# the batch of 32 compared with itself alone, the device stress test, W1 C = 1 and C = 64 once
. "$(dirname "$0")/../../device_call.sh"
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
r test_gpu_engine_small ./build/dev/tests/test_gpu_engine
r w1 $B -m $F --device 0 --concurrency 1,16,64 $W
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
pack g
for t in test_gpu_engine_full test_gpu_engine_small stress; do echo "== $t"; grep -hE "PASSED|FAILED|requests among|alone vs among|other tokens" /tmp/l/$t.log | head -8; done
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms" /tmp/l/w1.log
grep -E "heap from" /tmp/l/stress.log
