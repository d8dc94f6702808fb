#!/usr/bin/env bash
# session 14 call i: no pause while a request waits for its first chunk's tokens
# (COSY_SCHED_PAUSE_WAVE, default 1) against the pause of call e (=0): C = 1, 16, 64 on one
# engine and C = 64 fresh, alternating; the sweep and W2 with the new default
. "$(dirname "$0")/../../device_call.sh"
for i in 1 2 3; do
  r wave1_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  COSY_SCHED_PAUSE_WAVE=0 r wave0_$i $B -m $F --device 0 --concurrency 1,16,64 $W
done
for i in 1 2; do
  r fresh1_$i $B -m $F --device 0 --concurrency 64 $W
  COSY_SCHED_PAUSE_WAVE=0 r fresh0_$i $B -m $F --device 0 --concurrency 64 $W
done
r c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
r scale $B -m $F --device 0 --concurrency 4,16,32,48,64,128,256 $W
r w2 $B -m $F --device 0 --offline 256 $W
pack i
for f in wave1_1 wave0_1 wave1_2 wave0_2 wave1_3 wave0_3 fresh1_1 fresh0_1 fresh1_2 fresh0_2 c1 scale w2; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|^ +256 +[0-9.]+ +2560|first 64 req" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17}' | head -9; done
