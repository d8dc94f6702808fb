#!/usr/bin/env bash
# session 16 call c: gemv_tc_kernel's 64-row blocks for more than 32 rows (COSY_GEMV_TC_BIG:
# 0 the 32-row blocks with two tiles a warp, 1 64-row blocks one tile a warp, 2 the same with one
# k-block in flight and three blocks an SM): kernel tests (rows vs alone) per variant, the b64
# kernel table, test_gpu_llm decode steps, then W1 C = 1, 64 in alternation (default LLM; tc per
# variant), two rounds
. "$(dirname "$0")/../../device_call.sh"
V="big0:COSY_GEMV_TC_BIG=0 big1:COSY_GEMV_TC_BIG=1 big2:COSY_GEMV_TC_BIG=2"
for v in $V; do
  n=${v%%:*}; e=${v#*:}
  r tk_$n env $e timeout 90 ./build/dev/tests/test_kernels llm_gemv
  BENCH_FILTER="b64 gemv_tc" r bench_$n env $e timeout 60 ./build/dev/tests/test_kernels --bench llm_gemv
  r llm_$n env $e COSY_FULL_MODEL=$F timeout 90 ./build/dev/tests/test_gpu_llm
done
for k in 1 2; do
  r w1_def_$k $B -m $F --device 0 --concurrency 1,64 $W
  for v in $V; do n=${v%%:*}; e=${v#*:}
    r w1_tc_${n}_$k env $e COSY_LLM_DECODE=tc $B -m $F --device 0 --concurrency 1,64 $W
  done
done
pack c
for v in $V; do n=${v%%:*}; echo "== $n"; grep -hE "PASSED|FAILED" /tmp/l/tk_$n.log
  grep -h "^llm b64  gemv_tc" /tmp/l/bench_$n.log | tail -5 | cut -c1-90
  grep -h "TIMING llm decode step" /tmp/l/llm_$n.log | grep "tensor-core" | cut -c1-60 | head -7
done
for k in 1 2; do for m in def tc_big0 tc_big1 tc_big2; do echo "== $m $k"; rows /tmp/l/w1_${m}_$k.log | grep -v "first 1 req"; done; done
