#!/usr/bin/env bash
# session 14 call d: the deferral's threshold at C = 64 (fresh engine each run, two rounds,
# alternating), then the device stress test on the final tree
. "$(dirname "$0")/../../device_call.sh"
for i in 1 2; do
  for d in 1.0 0.5 2.0 0; do COSY_SCHED_DEFER=$d r c64_d${d}_$i $B -m $F --device 0 --concurrency 64 $W; done
done
r c1_16 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
pack d
for f in /tmp/l/c64_*.log /tmp/l/c1_16.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|ttfb by wave" $f | awk '{print $1,$2,$3,$4,$5,$7,$8, $10,$11,$12,$13,$14,$15,$16,$17,$18,$19}' | head -4; done
grep -E "PASSED|FAILED|SKIP" /tmp/l/stress.log | head -4; grep -E "rss|RSS|heap" /tmp/l/stress.log | tail -6
