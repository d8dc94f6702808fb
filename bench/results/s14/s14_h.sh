#!/usr/bin/env bash
# session 14 call h: COSY_ENGINE_BATCH_INVARIANT through the API: test_gpu_engine full and small,
# test_api; W1 C = 1, 16, 64 once on the final tree
. "$(dirname "$0")/../../device_call.sh"
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
r test_gpu_engine_small ./build/dev/tests/test_gpu_engine
r test_api ./build/dev/tests/test_api
r w1 ./build/dev/bench/bench_w1 -m $F --device 0 --concurrency 1,16,64 $W
pack h
for t in test_gpu_engine_full test_gpu_engine_small test_api; do echo "== $t"; grep -hE "PASSED|FAILED|requests among|alone vs among" /tmp/l/$t.log | head -8; done
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms" /tmp/l/w1.log
