#!/usr/bin/env bash
# session 16 call e: the final tree (batch-invariant LLM and the yield to playback by default):
# the standard W1 sweep (C = 1 with 16 requests; --concurrency 4,16,32,48,64,128,256 on one
# engine; W2 = --offline 256), three fresh C = 64 engines, the mixed LLM without the yield for
# comparison, test_gpu_engine on the full model (alone vs among 31), decode steps with and without
# the split kernel's k-chunks, then the device stress test in what time is left
. "$(dirname "$0")/../../device_call.sh"
r c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
r scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
r w2 $B -m $F --device 0 --offline 256 $W
for k in 1 2 3; do r c64_$k $B -m $F --device 0 --concurrency 64 $W; done
r mixed env COSY_LLM_DECODE=mixed COSY_SCHED_YIELD_MS=0 $B -m $F --device 0 --concurrency 1,16,64 $W
COSY_GPU_TEST_MODEL=$F r engine_full timeout 120 ./build/dev/tests/test_gpu_engine
r llm_chunks env COSY_FULL_MODEL=$F timeout 60 ./build/dev/tests/test_gpu_llm
r llm_nochunks env COSY_GEMV_TC_SPLIT_CHUNKS=0 COSY_FULL_MODEL=$F timeout 60 ./build/dev/tests/test_gpu_llm
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
pack e
for n in c1 scale w2 c64_1 c64_2 c64_3 mixed; do echo "== $n"; grep -hE "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|W2|offline|RTF|gpu util: mean|underruns:" /tmp/l/$n.log | grep -v "^bench_w1" | cut -c1-120; done
echo "== engine_full"; grep -hE "PASSED|FAILED|alone vs among|LLM:" /tmp/l/engine_full.log | head -8 | cut -c1-160
for n in llm_chunks llm_nochunks; do echo "== $n"; grep -h "TIMING llm decode step" /tmp/l/$n.log | grep "tensor-core" | cut -c1-60 | head -7; done
echo "== stress"; grep -hE "PASSED|FAILED|heap from|device memory|RSS" /tmp/l/stress.log | head -6
