#!/usr/bin/env bash
# session 15 call d: the vocoder's TF32 convs read weights rounded on the host
# (COSY_HPREC_TF32_ROUNDED; COSY_HIFT_PREROUND=0 = before) and the first-only flow batches as the
# default: test_gpu_hift (bits against TF32 rounding in the kernel, stages against the CPU),
# test_gpu_flow, test_gpu_engine (small model; full model: each of 32 batch requests alone), then
# W1 --concurrency 16,64 and C = 64 fresh in two rounds alternating base / preround off / tc /
# tc + preround off, the kernel top at C = 64
. "$(dirname "$0")/../../device_call.sh"
r test_gpu_hift timeout 200 ./build/dev/tests/test_gpu_hift
r test_gpu_flow timeout 100 ./build/dev/tests/test_gpu_flow
r test_gpu_engine_small timeout 200 ./build/dev/tests/test_gpu_engine
V="base:X=1 nopr:COSY_HIFT_PREROUND=0 tc:COSY_LLM_DECODE=tc tcnopr:COSY_LLM_DECODE=tc,COSY_HIFT_PREROUND=0"
ab "$V" 2
kernel_time_so
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=12 r ktop_c64 $B -m $F --device 0 --concurrency 64 $W
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=12 COSY_HIFT_PREROUND=0 r ktop_c64_nopr $B -m $F --device 0 --concurrency 64 $W
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full timeout $(( $(left) - 15 )) ./build/dev/tests/test_gpu_engine
pack d
for t in test_gpu_hift test_gpu_flow test_gpu_engine_small test_gpu_engine_full; do echo "== $t"; grep -hE "PASSED|FAILED|ERROR" /tmp/l/$t.log | head -4; done
grep -h "weights rounded on the host" /tmp/l/test_gpu_hift.log | head -3; grep -c "bit-identical" /tmp/l/test_gpu_hift.log; grep -h "DIFFERS" /tmp/l/test_gpu_hift.log | head
ab_rows "$V" 2
for m in ktop_c64 ktop_c64_nopr; do echo "== $m"; grep "kernel_time top" /tmp/l/$m.log | grep -E "conv_tc|total|top  [12]:" | head -4 | cut -c1-150; grep -E "^ +64 +128" /tmp/l/$m.log; done
