#!/usr/bin/env bash
# session 15 call f: the device stress test (full-size model) again, with the default scheduler
# and with COSY_SCHED_FIRST_ONLY=0, after call e's run saw the heap grow by 0.80 MiB from round
# 4 to round 6 (limit 0.25)
. "$(dirname "$0")/../../device_call.sh"
export COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0
r stress_def timeout 200 ./build/dev/tests/test_stress
COSY_SCHED_FIRST_ONLY=0 r stress_fo0 timeout $(( $(left) - 15 )) ./build/dev/tests/test_stress
pack f
for n in stress_def stress_fo0; do echo "== $n"; grep -hE "PASSED|FAILED|after round|heap from|after warm-up" /tmp/l/$n.log | cut -c1-170; done
