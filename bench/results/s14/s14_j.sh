#!/usr/bin/env bash
# session 14 call j: the final tree at C = 64: a scheduler trace (default LLM) and the CUPTI
# kernel top, for where the first burst's time goes
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
COSY_SCHED_TRACE=$L/trace_c64.txt r trace_c64 $B -m $F --device 0 --concurrency 16,64 $W
gzip -f $L/trace_c64.txt
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
inc=$CUDA_HOME/include; lib=$CUDA_HOME/lib64
[ -f "$inc/cupti.h" ] || inc=$CUDA_HOME/extras/CUPTI/include
[ -e "$lib/libcupti.so" ] || lib=$CUDA_HOME/extras/CUPTI/lib64
cc -shared -fPIC -O2 -I"$inc" -o build/dev/kernel_time.so bench/kernel_time.c -L"$lib" -Wl,-rpath,"$lib" -lcupti
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=20 r ktop_c64 $B -m $F --device 0 --concurrency 64 $W
cd $O && tar czf logs_j.tgz l && rm -rf l; cd - > /dev/null
rm -rf /tmp/l; tar xzf $O/logs_j.tgz -C /tmp 2>/dev/null
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|first 64" /tmp/l/trace_c64.log
zcat /tmp/l/trace_c64.txt.gz | grep -v " step " | awk '$2!="step"' | tail -40
grep "kernel_time top" /tmp/l/ktop_c64.log | head -20 | cut -c1-160
