#!/usr/bin/env bash
# session 14 call a: the pipelined vocoder conv (two slabs/strips, one barrier a chunk):
# test_gpu_hift (parity, pipelined vs not bit for bit), vocoder timing per pipe mode, W1 A/B
# (COSY_HCONV_PIPE 0 = auto, 1 = never), CUPTI kernel top at C = 64, tc mode at C = 1 (pause on/off)
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
COSY_FULL_MODEL=$F r test_gpu_hift ./build/dev/tests/test_gpu_hift
for m in 1 2; do COSY_HCONV_PIPE=$m COSY_TEST_FILTER=test_full_model COSY_FULL_MODEL=$F r hift_pipe$m ./build/dev/tests/test_gpu_hift; done
for i in 1 2; do
  r w1_auto_$i $B -m $F --device 0 --concurrency 1,16,64 $W
  COSY_HCONV_PIPE=1 r w1_never_$i $B -m $F --device 0 --concurrency 1,16,64 $W
done
COSY_HCONV_PIPE=2 r w1_always_1 $B -m $F --device 0 --concurrency 64 $W
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
inc=$CUDA_HOME/include; lib=$CUDA_HOME/lib64
[ -f "$inc/cupti.h" ] || inc=$CUDA_HOME/extras/CUPTI/include
[ -e "$lib/libcupti.so" ] || lib=$CUDA_HOME/extras/CUPTI/lib64
cc -shared -fPIC -O2 -I"$inc" -o build/dev/kernel_time.so bench/kernel_time.c -L"$lib" -Wl,-rpath,"$lib" -lcupti
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=14 r ktop_auto $B -m $F --device 0 --concurrency 64 $W
COSY_HCONV_PIPE=1 LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=14 r ktop_never $B -m $F --device 0 --concurrency 64 $W
COSY_LLM_DECODE=tc r tc_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_LLM_DECODE=tc COSY_SCHED_PAUSE=0 r tc_c1_p0 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_GPU_TEST_MODEL=$F r test_gpu_engine_full ./build/dev/tests/test_gpu_engine
cd $O && tar czf logs_a.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_a.tgz -C /tmp 2>/dev/null
grep -hE "FAIL|DIFFERS|PASSED|FAILED" /tmp/l/test_gpu_hift.log | head -8
grep -h "TIMING gpu_hift_infer" /tmp/l/test_gpu_hift.log /tmp/l/hift_pipe*.log
for f in w1_auto_1 w1_never_1 w1_auto_2 w1_never_2 w1_always_1 tc_c1 tc_c1_p0; do echo "== $f"; grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|gpu util' /tmp/l/$f.log | head -6; done
grep -h "conv_tc" /tmp/l/ktop_*.log | head -4
grep -hE "PASSED|FAILED" /tmp/l/test_gpu_engine_full.log
