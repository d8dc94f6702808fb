#!/usr/bin/env bash
# session 14 call d: the deferral's threshold at C = 64 (fresh engine each run, two rounds,
# alternating), then the device stress test on the final tree
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-build/dev/out}
L=$O/l; mkdir -p $L
T0=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) )); }
OUT=$L/build bash bench/device_run.sh build > $L/build.txt 2>&1
grep -E "rc=" $L/build/summary.txt
export LD_LIBRARY_PATH=$PWD/.dev/root/usr/lib/x86_64-linux-gnu
export COSY_TEST_MODEL=$PWD/build/dev/test/small-f32.gguf COSY_SHARED=$PWD/.dev/shared
F=$PWD/build/dev/full-bf16.gguf
W="--texts .dev/shared/bench/w1_texts.txt --prompt-wav .dev/shared/audio/zero_shot_prompt.wav"
r() { local n=$1; shift; if [ $(left) -lt 25 ]; then echo "skip $n"; return; fi; local t=$(date +%s); "$@" > $L/$n.log 2>&1; echo "$n rc=$? $(( $(date +%s) - t ))s"; }
B=./build/dev/bench/bench_w1
for i in 1 2; do
  for d in 1.0 0.5 2.0 0; do COSY_SCHED_DEFER=$d r c64_d${d}_$i $B -m $F --device 0 --concurrency 64 $W; done
done
r c1_16 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
cd $O && tar czf logs_d.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_d.tgz -C /tmp 2>/dev/null
for f in /tmp/l/c64_*.log /tmp/l/c1_16.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|ttfb by wave" $f | awk '{print $1,$2,$3,$4,$5,$7,$8, $10,$11,$12,$13,$14,$15,$16,$17,$18,$19}' | head -4; done
grep -E "PASSED|FAILED|SKIP" /tmp/l/stress.log | head -4; grep -E "rss|RSS|heap" /tmp/l/stress.log | tail -6
