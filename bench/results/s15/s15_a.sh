#!/usr/bin/env bash
# session 15 call a: requests prepared on the caller's thread (sched_submit); the flow's per-batch
# timing (COSY_FLOW_TIMING) beside the scheduler trace at C = 64; W1 C = 1, then C = 16,64 in two
# rounds alternating the default and the batch-invariant (tc) LLM; C = 64 on a fresh engine
. "$(dirname "$0")/../../device_call.sh"
COSY_SCHED_TRACE=$L/trace.txt COSY_FLOW_TIMING=$L/flowt.txt r trace $B -m $F --device 0 --concurrency 16,64 $W
r c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
for k in 1 2; do
  r def$k $B -m $F --device 0 --concurrency 16,64 $W
  COSY_LLM_DECODE=tc r tc$k $B -m $F --device 0 --concurrency 16,64 $W
done
r fresh64 $B -m $F --device 0 --concurrency 64 $W
gzip -f $L/trace.txt $L/flowt.txt
pack a
for n in trace c1 def1 tc1 def2 tc2 fresh64; do echo "== $n"; rows /tmp/l/$n.log; done
echo "== C=64 first burst: scheduler calls, then flow batches"
zcat /tmp/l/trace.txt.gz | awk '$2!="step" && $2!="held"' | sed -n 15,60p
zcat /tmp/l/flowt.txt.gz | sed -n 12,50p
