#!/usr/bin/env bash
# session 14 call k: the flow batch cap (COSY_SCHED_FLOW_FRAMES, default 3000) at 4500 and 6000,
# C = 16 then 64 on one engine, two rounds alternating
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-build/dev/out}
L=$O/l; mkdir -p $L
T0=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) )); }
OUT=$L/build bash bench/device_run.sh build > $L/build.txt 2>&1
grep -E "rc=" $L/build/summary.txt
export LD_LIBRARY_PATH=$PWD/.dev/root/usr/lib/x86_64-linux-gnu
F=$PWD/build/dev/full-bf16.gguf
W="--texts .dev/shared/bench/w1_texts.txt --prompt-wav .dev/shared/audio/zero_shot_prompt.wav"
r() { local n=$1; shift; if [ $(left) -lt 25 ]; then echo "skip $n"; return; fi; local t=$(date +%s); "$@" > $L/$n.log 2>&1; echo "$n rc=$? $(( $(date +%s) - t ))s"; }
B=./build/dev/bench/bench_w1
for i in 1 2 3; do
  for ff in 3000 4500 6000; do COSY_SCHED_FLOW_FRAMES=$ff r ff${ff}_$i $B -m $F --device 0 --concurrency 16,64 $W; done
done
cd $O && tar czf logs_k.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_k.tgz -C /tmp 2>/dev/null
for f in ff3000_1 ff4500_1 ff6000_1 ff3000_2 ff4500_2 ff6000_2 ff3000_3 ff4500_3 ff6000_3; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|first 64" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19}'; done
