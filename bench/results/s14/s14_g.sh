#!/usr/bin/env bash
# session 14 call g: the final tree: test_gpu_engine (full and small model) with every request of
# the batch of 32 compared with itself alone, the device stress test, W1 C = 1 and C = 64 once
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
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
r test_gpu_engine_small ./build/dev/tests/test_gpu_engine
r w1 $B -m $F --device 0 --concurrency 1,16,64 $W
COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$F COSY_STRESS_EXACT=0 r stress timeout $(( $(left) - 20 )) ./build/dev/tests/test_stress
cd $O && tar czf logs_g.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_g.tgz -C /tmp 2>/dev/null
for t in test_gpu_engine_full test_gpu_engine_small stress; do echo "== $t"; grep -hE "PASSED|FAILED|requests among|alone vs among|other tokens" /tmp/l/$t.log | head -8; done
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms" /tmp/l/w1.log
grep -E "heap from" /tmp/l/stress.log
