#!/usr/bin/env bash
# session 16 call d: the LLM yields to playback (COSY_SCHED_YIELD_MS, lib/scheduler.c
# yield_to_playback) with the default and the batch-invariant (tc) LLM: W1 --concurrency 1,16,64
# per variant, in alternation, two rounds (one engine per run)
. "$(dirname "$0")/../../device_call.sh"
V="def0:COSY_SCHED_YIELD_MS=0 def400:COSY_SCHED_YIELD_MS=400 tc0:COSY_LLM_DECODE=tc,COSY_SCHED_YIELD_MS=0 tc400:COSY_LLM_DECODE=tc,COSY_SCHED_YIELD_MS=400 tc250:COSY_LLM_DECODE=tc,COSY_SCHED_YIELD_MS=250"
for k in 1 2; do
  for v in $V; do n=${v%%:*}; e=${v#*:}
    r w1_${n}_$k env ${e//,/ } $B -m $F --device 0 --concurrency 1,16,64 $W
  done
done
pack d
for v in $V; do n=${v%%:*}; for k in 1 2; do echo "== $n $k"; rows /tmp/l/w1_${n}_$k.log | grep -v "first 1 req\|^ +16 " | cut -c1-125; done; done
