#!/usr/bin/env bash
# session 14 call k: the flow batch cap (COSY_SCHED_FLOW_FRAMES, default 3000) at 4500 and 6000,
# C = 16 then 64 on one engine, two rounds alternating
. "$(dirname "$0")/../../device_call.sh"
for i in 1 2 3; do
  for ff in 3000 4500 6000; do COSY_SCHED_FLOW_FRAMES=$ff r ff${ff}_$i $B -m $F --device 0 --concurrency 16,64 $W; done
done
pack k
for f in ff3000_1 ff4500_1 ff6000_1 ff3000_2 ff4500_2 ff6000_2 ff3000_3 ff4500_3 ff6000_3; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|first 64" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19}'; done
