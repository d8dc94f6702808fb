#!/usr/bin/env bash
# session 16 call a: gemv_tc_wide_kernel (64-row blocks whose warps share each k-block of x
# through shared memory) and tc_split_kernel over k-chunks. Kernel tests (rows together vs alone,
# bit for bit) with the wide kernel (TW 2, TW 1) and without it; the gemv kernel table (b1, b64)
# and test_gpu_llm's decode steps (full model) per variant; test_gpu_engine on the full model;
# then W1 C = 1, 64: the batch-invariant LLM (tc) with and without the wide kernel, and the default
. "$(dirname "$0")/../../device_call.sh"
r test_kernels timeout 200 ./build/dev/tests/test_kernels
r tk_gemv_w0 env COSY_GEMV_TC_WIDE=0 timeout 60 ./build/dev/tests/test_kernels llm_gemv
r tk_gemv_tw1 env COSY_GEMV_TC_WIDE_TW=1 timeout 60 ./build/dev/tests/test_kernels llm_gemv
V="w0:COSY_GEMV_TC_WIDE=0 tw2:X=1 tw1:COSY_GEMV_TC_WIDE_TW=1"
for v in $V; do
  n=${v%%:*}; e=${v#*:}
  BENCH_FILTER=gemv r bench_$n env $e timeout 60 ./build/dev/tests/test_kernels --bench llm_gemv
  r llm_$n env $e COSY_FULL_MODEL=$F timeout 90 ./build/dev/tests/test_gpu_llm
done
COSY_GPU_TEST_MODEL=$F r engine_full timeout 120 ./build/dev/tests/test_gpu_engine
r w1_tc env COSY_LLM_DECODE=tc $B -m $F --device 0 --concurrency 1,64 $W
r w1_def $B -m $F --device 0 --concurrency 1,64 $W
r w1_tc_w0 env COSY_LLM_DECODE=tc COSY_GEMV_TC_WIDE=0 $B -m $F --device 0 --concurrency 1,64 $W
r w1_tc_2 env COSY_LLM_DECODE=tc $B -m $F --device 0 --concurrency 64 $W
pack a
for t in test_kernels tk_gemv_w0 tk_gemv_tw1 engine_full; do
  echo "== $t"; grep -hE "PASSED|FAILED|FAIL |rows.*vs rows alone" /tmp/l/$t.log | grep -v " PASS$" | head -6
  grep -hcE "llm_gemv_tc rows.* PASS" /tmp/l/$t.log
done
for v in $V; do n=${v%%:*}; echo "== $n"
  grep -h "^llm b64  gemv_tc" /tmp/l/bench_$n.log | tail -5 | cut -c1-80
  grep -h "TIMING llm decode step" /tmp/l/llm_$n.log | grep "tensor-core" | cut -c1-60
done
for m in w1_tc w1_def w1_tc_w0 w1_tc_2; do echo "== $m"; rows /tmp/l/$m.log; done
