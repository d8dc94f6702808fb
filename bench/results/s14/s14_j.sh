#!/usr/bin/env bash
# session 14 call j: the final tree at C = 64: a scheduler trace (default LLM) and the CUPTI
# kernel top, for where the first burst's time goes
. "$(dirname "$0")/../../device_call.sh"
COSY_SCHED_TRACE=$L/trace_c64.txt r trace_c64 $B -m $F --device 0 --concurrency 16,64 $W
gzip -f $L/trace_c64.txt
kernel_time_so
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=20 r ktop_c64 $B -m $F --device 0 --concurrency 64 $W
pack j
grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ ?ms|first 64" /tmp/l/trace_c64.log
zcat /tmp/l/trace_c64.txt.gz | grep -v " step " | awk '$2!="step"' | tail -40
grep "kernel_time top" /tmp/l/ktop_c64.log | head -20 | cut -c1-160
