#!/usr/bin/env bash
# session 15 call b: scheduler knobs on the tree of call a (requests prepared at submit), in
# alternation, three rounds: W1 --concurrency 16,64 on one engine, then C = 64 on a fresh engine
. "$(dirname "$0")/../../device_call.sh"
V="base:X=1 fo:COSY_SCHED_FIRST_ONLY=1 vt:COSY_SCHED_VOCODER_THREAD=1 fovt:COSY_SCHED_FIRST_ONLY=1,COSY_SCHED_VOCODER_THREAD=1 tc:COSY_LLM_DECODE=tc tcfo:COSY_LLM_DECODE=tc,COSY_SCHED_FIRST_ONLY=1"
ab "$V" 3
pack b
ab_rows "$V" 3
