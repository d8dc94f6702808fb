#!/usr/bin/env bash
# session 15 call c: the flow's fused qkv epilogue + cache store (cosy_k_flow_qkv_post_store)
# and the paged DiT attention with cp.async double-buffered K/V tiles: kernel tests, the flow
# against the CPU reference, the attention's kernel table against the previous kernel (built
# from .dev/scratch/attention_old.cu into build/old), then W1 --concurrency 16,64 in two rounds
# alternating base / COSY_SCHED_FIRST_ONLY=1 / tc / tc + first-only, C = 64 fresh, kernel top
. "$(dirname "$0")/../../device_call.sh"
r test_kernels timeout 240 ./build/dev/tests/test_kernels
r test_gpu_flow timeout 120 ./build/dev/tests/test_gpu_flow
r bench_attn_new ./build/dev/tests/test_kernels --bench attn_dit_paged
cp kernels/attention.cu /tmp/attention_new.cu && cp .dev/scratch/attention_old.cu kernels/attention.cu
r build_old make -j16 B=build/old CUDA_ARCHS=90 build/old/tests/test_kernels
cp /tmp/attention_new.cu kernels/attention.cu
r bench_attn_old ./build/old/tests/test_kernels --bench attn_dit_paged
V="base:X=1 fo:COSY_SCHED_FIRST_ONLY=1 tc:COSY_LLM_DECODE=tc tcfo:COSY_LLM_DECODE=tc,COSY_SCHED_FIRST_ONLY=1"
ab "$V" 2
kernel_time_so
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=20 r ktop_c64 $B -m $F --device 0 --concurrency 64 $W
pack c
for t in test_kernels test_gpu_flow; do echo "== $t"; grep -hE "PASSED|FAILED|qkv_post_store|attn_dit_paged" /tmp/l/$t.log | head -8; done
echo "== attention table (new, then old)"
grep -h "attn_dit_paged" /tmp/l/bench_attn_new.log | tail -4; grep -h "attn_dit_paged" /tmp/l/bench_attn_old.log | tail -4
ab_rows "$V" 2
grep "kernel_time top" /tmp/l/ktop_c64.log | head -12 | cut -c1-150
