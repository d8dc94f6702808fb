#!/usr/bin/env bash
# session 14 call h: COSY_ENGINE_BATCH_INVARIANT through the API: test_gpu_engine full and small,
# test_api; W1 C = 1, 16, 64 once on the final tree
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
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
r test_gpu_engine_small ./build/dev/tests/test_gpu_engine
r test_api ./build/dev/tests/test_api
r w1 ./build/dev/bench/bench_w1 -m $F --device 0 --concurrency 1,16,64 $W
cd $O && tar czf logs_h.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_h.tgz -C /tmp 2>/dev/null
for t in test_gpu_engine_full test_gpu_engine_small test_api; do echo "== $t"; grep -hE "PASSED|FAILED|requests among|alone vs among" /tmp/l/$t.log | head -8; done
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms" /tmp/l/w1.log
