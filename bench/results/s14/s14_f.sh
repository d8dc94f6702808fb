#!/usr/bin/env bash
# session 14 call f: COSY_SCHED_URGENT_HOLD=1 (decode rows whose next chunk has its tokens sit out
# while a chunk with audio out is urgent) against none, default and tc LLM, C = 16 then 64 on
# one engine, three rounds alternating; sweeps and W2 with it
. "$(dirname "$0")/../../device_call.sh"
for i in 1 2 3; do
  r def_n_$i $B -m $F --device 0 --concurrency 16,64 $W
  COSY_SCHED_URGENT_HOLD=1 r def_h_$i $B -m $F --device 0 --concurrency 16,64 $W
  COSY_LLM_DECODE=tc r tc_n_$i $B -m $F --device 0 --concurrency 16,64 $W
  COSY_LLM_DECODE=tc COSY_SCHED_URGENT_HOLD=1 r tc_h_$i $B -m $F --device 0 --concurrency 16,64 $W
done
COSY_LLM_DECODE=tc COSY_SCHED_URGENT_HOLD=1 COSY_SCHED_TRACE=$L/trace_tc_h.txt r tc_h_trace $B -m $F --device 0 --concurrency 64 $W
gzip -f $L/trace_tc_h.txt 2>/dev/null
COSY_LLM_DECODE=tc COSY_SCHED_URGENT_HOLD=1 r tc_h_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc COSY_SCHED_URGENT_HOLD=1 r tc_h_scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
COSY_LLM_DECODE=tc COSY_SCHED_URGENT_HOLD=1 r tc_h_w2 $B -m $F --device 0 --offline 256 $W
COSY_SCHED_URGENT_HOLD=1 r def_h_scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
pack f
for f in def_n_1 def_h_1 tc_n_1 tc_h_1 def_n_2 def_h_2 tc_n_2 tc_h_2 def_n_3 def_h_3 tc_n_3 tc_h_3 tc_h_trace tc_h_c1 tc_h_scale tc_h_w2 def_h_scale; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|^ +256 +[0-9.]+ +2560" /tmp/l/$f.log | awk '{print $1,$3,$4,$5,$7,$8}' | head -9; done
