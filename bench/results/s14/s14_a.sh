#!/usr/bin/env bash
# session 14 call a: the pipelined vocoder conv (two slabs/strips, one barrier a chunk):
# test_gpu_hift (parity, pipelined vs not bit for bit), vocoder timing per pipe mode, W1 A/B
# (COSY_HCONV_PIPE 0 = auto, 1 = never), CUPTI kernel top at C = 64, tc mode at C = 1 (pause on/off)
. "$(dirname "$0")/../../device_call.sh"
COSY_FULL_MODEL=$F r test_gpu_hift ./build/dev/tests/test_gpu_hift
for m in 1 2; do COSY_HCONV_PIPE=$m COSY_TEST_FILTER=test_full_model COSY_FULL_MODEL=$F r hift_pipe$m ./build/dev/tests/test_gpu_hift; done
for i in 1 2; do
  r w1_auto_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  COSY_HCONV_PIPE=1 r w1_never_$i $B -m $F --device 0 --concurrency 1,16,64 $W
done
COSY_HCONV_PIPE=2 r w1_always_1 $B -m $F --device 0 --concurrency 64 $W
kernel_time_so
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=14 r ktop_auto $B -m $F --device 0 --concurrency 64 $W
COSY_HCONV_PIPE=1 LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=14 r ktop_never $B -m $F --device 0 --concurrency 64 $W
COSY_LLM_DECODE=tc r tc_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc COSY_SCHED_PAUSE=0 r tc_c1_p0 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
pack a
grep -hE "FAIL|DIFFERS|PASSED|FAILED" /tmp/l/test_gpu_hift.log | head -8
grep -h "TIMING gpu_hift_infer" /tmp/l/test_gpu_hift.log /tmp/l/hift_pipe*.log
for f in w1_auto_1 w1_never_1 w1_auto_2 w1_never_2 w1_always_1 tc_c1 tc_c1_p0; do echo "== $f"; grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|gpu util' /tmp/l/$f.log | head -6; done
grep -h "conv_tc" /tmp/l/ktop_*.log | head -4
grep -hE "PASSED|FAILED" /tmp/l/test_gpu_engine_full.log
