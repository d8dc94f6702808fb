#!/usr/bin/env bash
# session 15 call g: where a small flow call's time goes (for the next session): W1 at C = 1
# (16 requests: one-job flow and vocoder calls, one-row decode steps) under CUPTI with the 40
# kernels of the largest time and the busy time, and with COSY_FLOW_TIMING
. "$(dirname "$0")/../../device_call.sh"
kernel_time_so
LD_PRELOAD=$PWD/build/dev/kernel_time.so KERNEL_TIME_TOP=40 r ktop_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
COSY_FLOW_TIMING=$L/flowt_c1.txt r flowt_c1 $B -m $F --device 0 --concurrency 1 --requests 16 $W
pack g
grep -hE "^ +1 +16" /tmp/l/ktop_c1.log /tmp/l/flowt_c1.log
grep -h "kernel_time" /tmp/l/ktop_c1.log | cut -c1-150 | head -42
tail -12 /tmp/l/flowt_c1.txt
