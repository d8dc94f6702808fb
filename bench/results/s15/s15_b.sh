#!/usr/bin/env bash
# session 15 call b: scheduler knobs on the tree of call a (requests prepared at submit), in
# alternation, three rounds: W1 --concurrency 16,64 on one engine, then C = 64 on a fresh engine
. "$(dirname "$0")/../../device_call.sh"
V="base:X=1 fo:COSY_SCHED_FIRST_ONLY=1 vt:COSY_SCHED_VOCODER_THREAD=1 fovt:COSY_SCHED_FIRST_ONLY=1,COSY_SCHED_VOCODER_THREAD=1 tc:COSY_LLM_DECODE=tc tcfo:COSY_LLM_DECODE=tc,COSY_SCHED_FIRST_ONLY=1"
for k in 1 2 3; do
  for v in $V; do
    n=${v%%:*}; envs=${v#*:}
    r ${n}_$k env ${envs//,/ } $B -m $F --device 0 --concurrency 16,64 $W
    r ${n}_fresh_$k env ${envs//,/ } $B -m $F --device 0 --concurrency 64 $W
  done
done
pack b
for v in $V; do n=${v%%:*}; echo "== $n"
  for k in 1 2 3; do for m in ${n}_$k ${n}_fresh_$k; do
    printf "%-12s " $m; grep -hE "^ +64 +128" /tmp/l/$m.log | cut -c1-104 | tr -s ' ' | tr '\n' ' '
    grep -h "first 64 requests" /tmp/l/$m.log | sed 's/.*first 64 requests/ w1/; s/later 64/w2/' | tr -d '\n'; echo; done; done
done
