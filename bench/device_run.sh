#!/usr/bin/env bash
# One call on a lent GPU machine: build, parity against the CPU reference and the golden data,
# benchmarks. Logs go to $OUT (or build/dev/out); a short table is printed last.
#
#   bash bench/device_run.sh [steps]     steps: any of build kernels stages engine bench sched
#                                        frontend profile cudnn official prof_tests prof_w1
#                                        memory stress gputime fault sanitize longtext multi ab tc trace ktop
#                                        ncu_k ncu_llm ncu_voc w3 cli ff1epi attnv2 f16guard attnpre xfrag gemvb
#                                        tcbshape
#                                        flowsmall w2prof
#                                        sweep (the reference W1 / W2 run: see its block)
#                                        (default: build kernels stages engine bench frontend
#                                        official)
#
# The GPUs people own (docs/gpus.md), emulated on the big one through the test-only
# COSY_GPU_PROFILE (lib/gpu/gpu.h: a100, ada, rtx5090, h100 = the device as it is):
#   prof_tests  test_kernels, test_gpu_llm/flow/hift (full model too), test_gpu_engine (small
#               model), test_api under each profile of PROFILES (default "h100 a100 ada rtx5090";
#               about two minutes a profile). The launchers refuse a launch that asks for more
#               shared memory than the profile allows, so ada and rtx5090 passing (99 KB per block)
#               shows that no kernel asks for more. Logs: prof_<profile>_<test>.log
#   prof_w1     W1 at C = 1 (16 requests) and C = 16 (32) on the full model under each profile of
#               PROFILES. Logs: prof_<profile>_w1_c1.log, prof_<profile>_w1_c16.log; the summary
#               prints each profile's rows next to h100's
#   memory      budgets of BUDGETS_GB (default "24 32") GiB on this device (bench_w1 --memory-gb):
#               W1 at C = 16 on the full model must show no failed request and no underrun;
#               test_gpu_engine on the full model (the stated need is enough, 0.9 of it refused,
#               the budgets create and speak, two engines at once = one alone); and the need the
#               engine states at create for max_active 16, 64 and 256 (mem_need_ma*.log, the
#               numbers of docs/gpus.md's memory table). Needs the full model (the build step makes it)
#   fault       tests/test_gpu_fault (injected CUDA failures, COSY_CUDA_FAULT; small model): a
#               launch / out-of-memory failure at each sampled checked CUDA operation of a
#               two-request synthesis (warm engine, fresh engines), a sticky "device lost" one, and
#               failures at engine creation; statuses, no hang, later requests exact, destroy
#               clean. A few minutes on an H100; COSY_GPU_FAULT_POINTS (120) scales it.
#               Log: test_gpu_fault.log
#   sanitize    compute-sanitizer (from $CUDA_HOME/bin, /usr/local/cuda/bin or PATH) over the GPU
#               tests on the small models and W1 on the full model. memcheck: test_kernels,
#               test_gpu_llm, test_gpu_flow, test_gpu_hift, test_gpu_engine (its synthesis test
#               only: COSY_TEST_FILTER), test_gpu_frontend, bench_w1 at C = 16 (16 requests of 60
#               tokens, no warm-up, a 16 GiB budget); racecheck, initcheck and synccheck:
#               test_kernels, test_gpu_llm/flow/hift, and (initcheck, synccheck) the engine's
#               synthesis test and the same W1 run. Racecheck counts hazards inside cuBLASLt's
#               kernels apart (their TMA/wgmma shared-memory use reads as WAR hazards); initcheck
#               runs with COSY_GEMM_SAN_INIT=1 (GEMM outputs cleared first: the bulk stores of
#               cuBLASLt's sm_90 kernels are invisible to it). Each run has a time limit (seconds
#               in the step, times SAN_SCALE, default 1): a run cut by its limit says "timeout"
#               and counts the errors it printed so far. The limits add up to ~1150 s; the runs
#               take far less (memcheck's seven ~60 s on an H100), but to be safe run memcheck
#               and the other three in separate calls: SAN_TOOLS (default "memcheck racecheck
#               initcheck synccheck") picks tools. Logs: san_<tool>_<run>.log; a line per run in
#               the summary: "san <tool> <run>: N errors (rc)"
#   ab          W1 at C = 16 and 64 with each scheduler / vocoder option against the defaults,
#               in alternation, twice (AB_VARIANTS, AB_ROUNDS, AB_LEVELS: see the step; about
#               12 s a run after a build). Logs: ab_*.log; "ab <variant> <round>:" rows
#   ncu_k       ncu sections (occupancy, warp stalls) of a few vocoder-conv and flow-attention
#               launches under W1 at C = 16 (NCUK_REGEX, NCUK_SKIP, NCUK_COUNT, NCUK_W1;
#               NCUK_SOURCE=1: the stalls per SASS instruction too, ncu_k_sass.csv)
#   ncu_llm     ncu sections (speed of light, warp stalls, scheduler, memory) of one decode step's
#               kernels at batch 1 inside W1 at C = 1 (2 requests): NCUL_COUNT (10) launches
#               of gemv_tc_kernel / paged_decode_kernel after NCUL_SKIP (400, ~3 steps in);
#               each kernel alone, so its duration is its own chain (docs/kernels.md, "The LLM
#               decode step against its floor"). Log: ncu_llm.log (timeout NCUL_TIMEOUT, 240 s)
#   ncu_voc     ncu --set full of the 16-request vocoder's 64- and 128-channel fp16 convs in the
#               kernel bench (test_kernels --bench hift, one launch of each after 5): stage 2 k3
#               (conv3), stage 2 k7 + residual (conv2), stage 1 k3 (conv3); a report each with
#               the source counters and its SASS page as CSV (where the excessive sectors and
#               shared-memory wavefronts come from: docs/kernels.md, "The 64- and 128-channel
#               convs under ncu"). Logs: ncu_voc_<name>.log, ncu_voc_<name>_sass.csv
#   ktop        the 30 (KTOP_N) kernels of the largest GPU time in a 64-request first-chunk burst
#               and W1 at C = 64 (KTOP_RUNS, KTOP_ENV; bench/kernel_time.c)
#   flowsmall   where a single request's flow calls spend their time (docs/kernels.md, "The flow's
#               small calls"): every cuBLASLt configuration of the flow's GEMMs at 112-512 rows
#               (BENCH_GEMM_ALGOS=2), the kernel table's DiT groups ("dit 116", "dit call", ...:
#               BENCH_FILTER="dit "), W1 at C = 1 (16 requests) under CUPTI (KERNEL_TIME_TOP=70)
#               and with the scheduler trace (bench/trace_summary.py --timeline 1). Logs:
#               flowsmall_algos.log, flowsmall_bench.log, flowsmall_ktop.log, flowsmall_trace.*
#   w2prof      where W2's time goes (bench/RESULTS.md, "Kernels and stages", "Where W2's time
#               goes"): W2 with the scheduler trace and the flow batches' timing (COSY_SCHED_TRACE,
#               COSY_FLOW_TIMING; bench/trace_summary.py: each stage's busy share), W2 under CUPTI
#               (KERNEL_TIME_TOP=60), and the batch-1 decode GEMV's weight stream alone
#               (bench/gemv_stream.cu). Logs: w2prof_trace.log, w2prof_trace.txt.xz,
#               w2prof_trace_sum.txt, w2prof_flowt.txt, w2prof_ktop.log, w2prof_stream.log
#   conv        the vocoder's conv kernels (kernels/conv.cu; not in the default steps: `bash
#               bench/device_run.sh build conv`): test_gpu_hift's conv tests and golden decode
#               (every cosy_hift_conv_kernel choice vs the CPU loop and bit for bit vs the old
#               kernel; logs conv_test.log, conv_decode.log), then test_kernels --bench hift
#               (conv_bench.log). Summary: failed checks ("conv check: ..."), the golden
#               decode's F16 error beside TF32's ("conv golden rel L2: F16 ..."), each
#               precision's waveform digest ("conv decode final [F16] waveform digest ...": the
#               same number from two builds = the same bits), then the
#               "conv cmp" line of each vocoder launch (us of every kernel, speed-up over the
#               old one, the fp16-operand rows "f16 ..." and "f16/tf32 x" at the end) and the
#               "conv sum" / "conv sum all" lines of each scenario (voc s100, f224, b16);
#               "conv staged: N checks bit-identical to conv2, M of them staged; ..." (the staged
#               kernel, test_kernel_conv_staged) and the rows "f16 staged" / "staged/f16 x"
#   f16guard    the fp16 vocoder's saturation guard (COSY_VOCODER_FP16; lib/gpu/hift.c,
#               "Saturation"; not in the default steps: `bash bench/device_run.sh build
#               f16guard`): test_gpu_hift test_f16_guard (a mel scaled past fp16's 65504 in one
#               job of a batch: that job == its TF32 decode alone, the others == their F16 decode
#               alone, bit for bit; 1 fallback per saturated call, none without), the conv tests
#               (test_kernel_conv*: the saturation flag at the threshold and per conv of a launch)
#               and the golden decode (test_decode_golden), test_kernels --bench hift (the F16
#               kernel's time with the flag; F16G_BENCH=0 skips it), then W2 (--offline W2_N, 256)
#               with --vocoder-tf32 and with --vocoder-fp16 (the default), F16G_ROUNDS (1) times
#               in alternation.
#               Logs: f16guard_*.log. Summary: "f16guard check: ..." (failed checks: none
#               expected), "f16guard: ..." (the test's fallback counts and bit comparisons, the
#               flag lines, the golden F16 vs TF32 error), "f16guard conv cmp|sum ...",
#               "f16guard w2 <tf32|fp16> <round>: reqs
#               wall_s audio_s RTF xRT ..." and "f16guard w2 fp16 <round>: vocoder fp16: N TF32
#               fallbacks in M jobs" (engine 0's count at destroy, warm-up included)
#   attnsplit   the flow's attention with split keys (cosy_k_attn_dit_paged_split, and
#               cosy_k_attn_dit_paged_auto: the part count per segment; not in the default steps:
#               `bash bench/device_run.sh build attnsplit`): test_kernels attn_dit_paged (vs
#               double at 1..8 parts and auto, a segment alone == in its batch bit for bit, auto
#               == the one-block / split-S kernel bit for bit), test_gpu_flow
#               (test_batch_cache_split / _auto: the packed flow with 4 parts / auto, small model),
#               the kernel table of small flow calls (group "dit call": attn_dit_paged vs
#               attn_dit_split 2/4/8 and attn_dit_auto), then W1 at C = 16 with
#               COSY_FLOW_ATTN_SPLIT unset, =4 and =auto (ATTNSPLIT_VARIANTS, ab syntax). Summary:
#               "attnsplit check: ..." (failed checks; none expected), "attnsplit: dit call ..."
#               rows, "attnsplit <variant>: ..."
#   attnv2      the flow's attention by cosy_k_attn_dit_paged_v2 (not in the default steps: `bash
#               bench/device_run.sh build attnv2`): test_kernels attn_dit_paged (v2 at 64- and
#               128-query tiles vs double, == the one-block kernel bit for bit, a segment alone
#               == in its batch), test_gpu_flow (test_batch_cache_v2: the packed flow with
#               COSY_FLOW_ATTN_V2 = 64, 128 and auto, small model), the kernel table rows of
#               attn_dit_paged (groups "dit 400" / "dit 1000": 2 x 50 queries over 350 / 950
#               cached keys; "dit call": small calls and the loaded 16- and 22-job batches), then
#               W2 (--offline W2_N, 256) and W1 at C = 16 with COSY_FLOW_ATTN_V2 unset, =64, =128
#               and =auto (ATTNV2_VARIANTS, ab syntax). Summary: "attnv2 check: ..." (failed checks;
#               the v2 lines of the test), "attnv2: ..." kernel rows, "attnv2 <variant> w2: ..."
#               (reqs wall_s audio_s RTF xRT ...), "attnv2 <variant>: ..." (W1)
#   ff1epi      the flow's ff1 GEMM with cuBLASLt's bias + GELU epilogue and the flow's
#               elementwise launchers (not in the default steps: `bash bench/device_run.sh build
#               ff1epi`): test_kernels gemm (cosy_k_gemm_gelu vs double;
#               the "gemm_gelu fused" lines must PASS: cuBLASLt took the fused form),
#               test_kernels dit_elementwise and flow_pack (the flow's elementwise launchers, with
#               pdl where the device has it), then under each of FF1_VARIANTS (ab syntax, default
#               "base pdl:COSY_FLOW_PDL=1") test_gpu_flow (golden +
#               full-size timing) and W1 at C = 16. Summary: "ff1epi check: ..." (the gemm_gelu
#               lines, failed checks), "ff1epi <variant>: ..." (ff1 form, TIMING lines),
#               "ff1epi <variant> w1: ..."
#   attnpre     the LLM's decode attention with its independent loads issued before it waits
#               for the q|k|v projection (COSY_LLM_ATTN_EARLY=1: cosy_k_paged_decode's
#               COSY_K_DECODE_EARLY; not in the default steps: `bash bench/device_run.sh build
#               attnpre`): test_kernels attention (the flag == the plain kernel bit for bit at
#               lengths around split and page boundaries, every merge, fp32 and bf16; and behind
#               cosy_k_llm_gemv_tc as its programmatic predecessor writing the newest rows), the
#               kernel table's rows "qkv+attn pdl|early" (that pair's time at every batch group
#               of the table, contexts 200, 1000 and W2's mix of 100-380 under the bucket of
#               512, where half the grid's splits are past their sequence's end), then
#               test_gpu_llm (small model: parity; full model: decode-step timings) with the knob
#               =0 and =1, test_gpu_engine's synthesis test on the full model with =1 (the
#               batch-invariant LLM: a request alone == among 31 others), then W1 at C = 1
#               (ATTNPRE_ROUNDS, 2, rounds of off, on). About 90 s after a build on an H200 (80 s
#               with ATTNPRE_ROUNDS=1). Summary: "attnpre check: ..." (failed checks: none
#               expected; the "[early pdl]" lines), "attnpre: llm b1 qkv+attn ..."
#               (kernel rows), "attnpre <off|on> llm: ..." (passed and failed tests), "attnpre
#               <off|on> steps: b<batch> <ms> ..." (the tensor-core + PDL decode steps: the
#               gain), "attnpre on engine: ..." and "attnpre <off|on> w1 <round>: C=1 ..."
#   tc          the batch-invariant LLM (the default, COSY_LLM_DECODE=tc) against the mixed one
#               (COSY_LLM_DECODE=mixed, not batch-invariant): test_kernels
#               llm_gemv, the gemv_tc kernel table (test_kernels --bench llm_gemv), test_gpu_llm's
#               decode-step timings (full model), W1 at TC_LEVELS (default 1,16,32,64) in each
#               mode, each under TC_VARIANTS (ab syntax, default "base"; e.g.
#               "base prof:COSY_GPU_PROFILE=a100"; docs/knobs.md lists the knobs). Summary lines
#               "tc <variant> steps: ..." and "tc <variant> <mode> C=...: ..."
#   xfrag       gemv_tc's x fragments once per block (COSY_LLM_XFRAG=1, args xfrag; kernels/gemv.cu;
#               not in the default steps: `bash bench/device_run.sh build xfrag`): test_kernels
#               llm_gemv (must pass; its "llm_gemv_tc xfrag" lines: the in-block path == the
#               per-warp path bit for bit at 1, 2, 5, 8 rows and 16 without the workspace, every
#               prologue / epilogue, K = 896 and 4864, with and without clusters, "in-block vs
#               per-warp" where it ran; and vs double with xfrag), test_gpu_llm on the small and
#               the full model with COSY_LLM_XFRAG=1 and =0 (must pass; the full model's
#               decode-step timings of both), the kernel table's gemv_tc rows at b1 (gemv_tc /
#               gemv_tc xfrag / gemv_tc xfrag2: COSY_LLM_XFRAG=2, x not staged) and b16 (nosplit
#               / nosplit xfrag), then W1 at C = 1 =0 / =1 in alternation, twice
#               (XFRAG_ROUNDS). XFRAG_VARIANTS (default "base xf"; "base xf xf2" adds
#               COSY_LLM_XFRAG=2) picks the variants of test_gpu_llm and W1. About 100 s on an
#               H200 with XFRAG_ROUNDS=1. Logs: xfrag_*.log. Summary: "xfrag check: ..." (failed checks:
#               none expected), "xfrag: ..." and "xfrag <variant> gpu_llm: ..." (pass counts),
#               "xfrag bench: ..." (kernel rows), "xfrag <variant> steps: b1 ms ..."
#               (test_gpu_llm's tensor-core decode steps), "xfrag <variant> <round> w1: ..." (W1
#               C = 1 rows)
#   gemvb       the tensor-core decode GEMV above 8 rows with the weights as mma's B operand
#               (COSY_LLM_GEMVB=1, kernels/gemv.cu gemv_tcb_kernel; not in the default steps: `bash
#               bench/device_run.sh build gemvb`): test_kernels llm_gemv (the "llm_gemv_tcb" lines:
#               the five matrices at 9-64 rows vs double, and "llm_gemv_tcb rows": rows together vs
#               each alone, bit for bit), test_gpu_llm (small model and $FULL's decode-step timings)
#               with the knob =0 and =1, test_gpu_engine's synthesis test on the full model with
#               =1 (a request alone vs among 31 others: "batch-invariant LLM" lines), the kernel
#               table's gemv_tc rows (llm b16 / b64: "gemv_tc ..." the default kernel, "gemv_tcb
#               ..." the new one), then W1 (--concurrency 16,64) and W2 (--offline W2_N, 256)
#               =0 vs =1 in alternation, GEMVB_ROUNDS (1; 0: none) times. Summary: "gemvb check: ..."
#               (failed checks; none expected), "gemvb engine: ..." (the batch-invariant LLM
#               lines), "gemvb <base|b> steps: b16 ms b32 ms ..." (decode step per batch),
#               "gemvb: llm b16 gemv_tc(b) ..." kernel rows, "gemvb <base|b> <round> w1|w2: ...".
#               110 s on an H200 after a build with GEMVB_ROUNDS=0 (each round adds W1 / W2
#               twice, ~40 s). Logs: gemvb_*.log
#   tcbshape    the block shapes of the B-operand decode GEMV (kernels/gemv.cu tcb_shape; not in the
#               default steps: `bash bench/device_run.sh build tcbshape`): test_kernels llm_gemv (every
#               shape forced, rows together == each alone), the kernel table's gemv_tcb rows at 16-224
#               rows under each shape forced (BENCH_TCB_SHAPES=1) beside the rule's, and the decode
#               step on $FULL (test_gpu_llm). Summary: "tcbshape check: ..." (failed checks; none
#               expected), "tcbshape bNN MATRIX: rule us / shape 1 / 2 / 3" (the best shape's should
#               be the rule's), "tcbshape steps: b1 ms ...". ~100 s on an H200 after a build. Logs:
#               tcbshape_*.log
#   wheel       the Python package's GPU wheel (bench/wheel_device_run.sh, not in the default
#               steps; after the build step): built with every target (CUDA_ARCHS=all), installed
#               in a fresh venv, its library checked (the package's own, every target named, the
#               same audio as build/dev's), then W1 at C = 1 and 16 through the HTTP server from
#               the wheel's venv and from this checkout (target: within 10%). Needs setuptools in
#               .dev/wheels_build and the serving wheels of bench/serve_device_run.sh.
#               WHEEL_STEPS="check" or "serve" splits it over two calls. Summary lines
#               "wheel: ..."; logs: wheel/
#   trace       W1 at C = 64 with the scheduler's trace under TRACE_VARIANTS (ab syntax), each
#               summarized by bench/trace_summary.py (calls, busy shares, LLM step interval)
#   multi       two GPUs (SKIP with fewer): the GPU parity tests on device 1 alone
#               (CUDA_VISIBLE_DEVICES=1: test_kernels, test_gpu_llm/flow/hift with the full model,
#               test_gpu_engine on the small model), test_gpu_engine's two-device test on both
#               (device 1 == device 0 sample for sample; one engine per device serving at once ==
#               each alone), W1 on the full model at C = 64 on device 0 and at C = 128 on
#               `bench_w1 --device 0,1` (one engine per GPU, 64 clients each), then
#               bench/serve_device_run.sh's multi step (HTTP: one server process per GPU, clients
#               spread over them; Triton: one instance per GPU; both at C = 128 against one GPU;
#               MULTI_SERVE=0 skips it, MULTI_SERVE_S (270) limits it; it needs the wheels that
#               script names). Summary line:
#               "multi: xRT 2 GPUs C=128 / 1 GPU C=64 = R (target >= 1.9) ...; TTFB p95 ...".
#               Estimated (not yet timed): about 4 minutes without the serving part, at most 9 with
#               it, after a build in an earlier call.
#               Logs: multi_*.log, serve/
#   w3          W3, live users (docs/scheduler.md section 6; bench_w1 --users) on the full model:
#               W3_USERS (default 128,192,256,320,384,448) users a level, levels of W3_LEVEL_S
#               (40) s, the requests of the first W3_SKIP_S (10) s not counted, W3_ARGS more
#               bench_w1 arguments (e.g. --think 2 --utter 2,10 --seed 1 --p95-ms 200); about
#               6 x (40 + ~10) s + load. Log: w3.log; its summary table and headline print last
#               (the headline also in the summary: "w3: W3 headline: N users ..."). The engine's
#               max_active is the largest level (448; up to 1024 on a GPU): W3_ARGS="--max-active
#               256" gives the engine's default, and COSY_SCHED_MAX_STREAMS=N in the environment
#               bounds the requests active in any stage (docs/scheduler.md)
#   cli         cosyvoice-say built with CUDA: tests/test_cli.py (its no-GPU case hides the GPUs:
#               "no CUDA GPU found ... use device -1") and a voice cloned + a sentence on device 0
#               written as WAV to standard output. Summary lines "cli: ..." and "cli gpu: ..."
# e.g. bash bench/device_run.sh build prof_tests    (PROFILES="ada" for one profile)
#      bash bench/device_run.sh prof_w1 memory       (after a build in the same checkout)
#
# frontend: the voice front end on the GPU (test_gpu_frontend: kernels, golden parity, the GPU
# engine's cloning, full-size parity + timing on $B/full-fe.gguf, made once by make_model.py
# --frontend full), test_voice_audio, then bench_voice on the full-size model: a voice from 10 s
# of audio on the GPU engine (--beside: audio gaps of a synthesis while cloning) and on the CPU
# (FE_CPU=0 skips the CPU run, minutes of single-threaded fp32).
#
# What it expects (the device has nvcc and python3 + numpy, nothing else):
#   .dev/root/          libsamplerate + cmocka unpacked from Debian packages (dpkg -x)
#   .dev/shared.tar.xz  golden/ tokenizer/ audio/ bench/ from ../shared (unpacked to .dev/shared)
# Make them here with:
#   mkdir -p .dev/debs && (cd .dev/debs && apt-get download libsamplerate0 libsamplerate0-dev \
#     libcmocka0 libcmocka-dev) && for f in .dev/debs/*.deb; do dpkg -x $f .dev/root; done
#   tar -C ../shared -cf - golden tokenizer audio bench | xz -T2 -6 > .dev/shared.tar.xz
# Runs from the repository root wherever it is called from, under the C locale (the printf and awk
# of the timings read and write '.' decimals); JOBS (default: the number of cores) for make.
set -u
cd "$(dirname "$0")/.."
export LC_ALL=C
STEPS=${*:-build kernels stages engine bench frontend official}
OUT=${OUT:-build/dev/out}
mkdir -p "$OUT"
B=build/dev
ROOT=$PWD/.dev/root
export CPATH=$ROOT/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
if [ ! -d .dev/shared/golden ] && [ -f .dev/shared.tar.xz ]; then
  mkdir -p .dev/shared && tar -C .dev/shared -xJf .dev/shared.tar.xz
fi
# .dev/shared_small.tar.xz (tokenizer/ audio/ bench/, no golden/: the benchmarks and the serving
# runs need no more, and it leaves room in the carry for the serving wheels)
if [ ! -d .dev/shared/tokenizer ] && [ -f .dev/shared_small.tar.xz ]; then
  mkdir -p .dev/shared && tar -C .dev/shared -xJf .dev/shared_small.tar.xz
fi
SHARED=$PWD/.dev/shared
[ -d "$SHARED/tokenizer" ] || SHARED=$(cd .. && pwd)/shared
export COSY_SHARED=$SHARED
ARCH=${ARCH:-"-gencode arch=compute_90,code=sm_90"}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
run() { # name, command...: run, log to $OUT/name.log, record pass/fail and seconds
  local name=$1; shift
  local t0=$(date +%s.%N)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')
  note "$(printf '%-28s rc=%-3s %7.1fs' "$name" "$rc" "$dt")"
  return $rc
}

# a variant spec "name[:VAR=value,VAR=value]" (the ab and trace steps): sets $v and envs=(...)
variant() {
  # name[:VAR=value,...,--flag=value,...]: environment for the run, and bench_w1 arguments
  # (--flag=value becomes "--flag value"); sets v, envs (the VAR=value entries) and vargs
  v=${1%%:*}
  local items=() it
  envs=()
  vargs=()
  if [[ "$1" == *:* ]]; then IFS=, read -r -a items <<< "${1#*:}"; fi
  for it in "${items[@]}"; do
    if [[ "$it" == --* ]]; then
      vargs+=("${it%%=*}")
      [[ "$it" == *=* ]] && vargs+=("${it#*=}")
    else
      envs+=("$it")
    fi
  done
}
# $B/kernel_time.so (bench/kernel_time.c, CUPTI) for the gputime and ktop steps
kernel_time_so() {
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  local inc=$CUDA_HOME/include lib=$CUDA_HOME/lib64
  [ -f "$inc/cupti.h" ] || inc=$CUDA_HOME/extras/CUPTI/include
  [ -e "$lib/libcupti.so" ] || lib=$CUDA_HOME/extras/CUPTI/lib64
  run kernel_time_so cc -shared -fPIC -O2 -I"$inc" -o $B/kernel_time.so bench/kernel_time.c \
    -L"$lib" -Wl,-rpath,"$lib" -lcupti
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
note "device: $(sed -n 2p "$OUT/gpu.txt")  commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

TESTS="$B/tests/test_kernels $B/tests/test_gpu_llm $B/tests/test_gpu_flow $B/tests/test_gpu_hift $B/tests/test_gpu_engine $B/tests/test_api $B/tests/test_gpu_frontend $B/tests/test_voice_audio $B/tests/test_stress $B/tests/test_gpu_fault"
BENCHES="$B/bench/bench_w1 $B/bench/bench_voice" # the kernel benchmark is test_kernels --bench
SMALL=$B/test/small-f32.gguf
SMALL_FE=$B/test/small-fe-f32.gguf
FULL_FE=$B/full-fe.gguf
FULL=$B/full-bf16.gguf

if [[ " $STEPS " == *" build "* ]]; then
  run build make -j"${JOBS:-$(nproc)}" B=$B SHARED_DIR="$SHARED" CUDA=1 CUDA_ARCHS="$ARCH" lib $TESTS \
    $BENCHES $SMALL $SMALL_FE
  if [ ! -f "$FULL" ]; then
    run make_full python3 tools/make_model.py --preset full -o "$FULL" --tokenizer "$SHARED/tokenizer"
  fi
fi
export COSY_TEST_MODEL=$PWD/$SMALL
if [[ " $STEPS " == *" kernels "* ]]; then
  run test_kernels ./$B/tests/test_kernels
fi
if [[ " $STEPS " == *" stages "* ]]; then
  for t in ${STAGE_TESTS:-llm flow hift}; do
    COSY_FULL_MODEL=$PWD/$FULL run test_gpu_$t ./$B/tests/test_gpu_$t
  done
fi
if [[ " $STEPS " == *" engine "* ]]; then
  run test_gpu_engine_small ./$B/tests/test_gpu_engine
  COSY_GPU_TEST_MODEL=$PWD/$FULL run test_gpu_engine_full ./$B/tests/test_gpu_engine
  run test_api ./$B/tests/test_api
fi
if [[ " $STEPS " == *" stress "* ]]; then # not in the default steps: bash bench/device_run.sh build stress
  COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$PWD/$FULL COSY_STRESS_EXACT=${COSY_STRESS_EXACT:-0} \
    run test_stress_gpu_full ./$B/tests/test_stress
fi
if [[ " $STEPS " == *" cli "* ]]; then # not in the default steps: bash bench/device_run.sh build cli
  # cosyvoice-say of the CUDA build: tests/test_cli.py (its no-GPU case hides the GPUs with
  # CUDA_VISIBLE_DEVICES= and must read "no CUDA GPU found"), then a voice cloned and a sentence
  # said on device 0, the WAV written to standard output and read back
  run cli_build make -j"${JOBS:-$(nproc)}" B=$B SHARED_DIR="$SHARED" CUDA=1 CUDA_ARCHS="$ARCH" \
    $B/bin/cosyvoice-say $SMALL_FE
  COSY_CLI=$PWD/$B/bin/cosyvoice-say COSY_TEST_FE_MODEL=$PWD/$SMALL_FE run test_cli python3 tests/test_cli.py
  run cli_gpu bash -c "./$B/bin/cosyvoice-say -m $SMALL_FE --device 0 --max-tokens 50 \
    --prompt-wav '$SHARED/audio/cross_lingual_prompt.wav' --prompt-text 'A prompt.' -o - 'Hello from the GPU.' |
    python3 -c 'import io, sys, wave; w = wave.open(io.BytesIO(sys.stdin.buffer.read())); \
      print(\"cli gpu: WAV on stdout, %d frames at %d Hz\" % (w.getnframes(), w.getframerate()))'"
  note "cli: $(grep -hE 'no CUDA GPU|no NVIDIA|passed,' "$OUT/test_cli.log" | tr '\n' ' ')"
  note "$(grep -h 'cli gpu:' "$OUT/cli_gpu.log")"
fi
if [[ " $STEPS " == *" fault "* ]]; then # not in the default steps: bash bench/device_run.sh build fault
  run test_gpu_fault timeout ${FAULT_TIMEOUT:-480} ./$B/tests/test_gpu_fault
fi
if [[ " $STEPS " == *" sanitize "* ]]; then # not in the default steps: bash bench/device_run.sh build sanitize
  CS=""
  for c in "${CUDA_HOME:-}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer "$(command -v compute-sanitizer 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && { CS=$c; break; }
  done
  if [ -z "$CS" ]; then
    note "sanitize: SKIP (no compute-sanitizer in \$CUDA_HOME/bin, /usr/local/cuda/bin or PATH)"
  else
    note "sanitize: $($CS --version 2>/dev/null | tail -1)"
    SCALE=${SAN_SCALE:-1}
    # san TOOL NAME LIMIT_S command...: one sanitizer run; the error count from its
    # "ERROR SUMMARY" line, else (cut by the limit) from the reports it printed
    san() {
      local tool=$1 name=$2 lim=$3; shift 3
      lim=$(awk -v a="$lim" -v s="$SCALE" 'BEGIN{printf "%d", a * s}')
      local log="$OUT/san_${tool}_${name}.log" t0=$(date +%s.%N) extra=()
      [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
      # racecheck: cuBLASLt's own kernels (nvjet*, cublasLt::*) report WAR hazards on the shared
      # memory their TMA / wgmma pipelines use (the first run's san_racecheck_test_kernels.log;
      # leaving them uninstrumented with --kernel-name-exclude made the sanitizer itself fail on
      # a hardware exception), so every hazard is printed and the ones inside cuBLASLt are
      # counted apart from ours
      local plim=200
      [ "$tool" = racecheck ] && plim=1000000
      # initcheck: cuBLASLt's sm_90 GEMMs write their outputs with bulk (TMA) stores that
      # initcheck does not see, so every read of a GEMM output would be reported;
      # COSY_GEMM_SAN_INIT=1 (kernels/gemm.cu) clears each GEMM's output first
      local envs=()
      [ "$tool" = initcheck ] && envs=(env COSY_GEMM_SAN_INIT=1)
      timeout -k 10 "$lim" "${envs[@]}" "$CS" --tool "$tool" --target-processes all --launch-timeout 0 \
        --error-exitcode 42 --print-limit "$plim" "${extra[@]}" "$@" > "$log" 2>&1
      local rc=$? n
      n=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
      local how="rc=$rc"
      if [ -z "$n" ]; then
        n=$(grep -cE '^========= (Invalid|Race|Uninitialized|Barrier|Program hit|Error|Warning|Host API)' "$log")
        how="rc=$rc, no summary$([ $rc = 124 ] || [ $rc = 137 ] && echo ': timeout after '"$lim"' s, partial')"
      fi
      if [ "$tool" = racecheck ]; then
        # hazards whose threads are all in cuBLASLt kernels vs the rest (ours)
        local split
        split=$(awk '
          function flush() { if (open) { if (lib) nl++; else no++ } open = 0; lib = 1 }
          /Potential .* hazard|^========= Error: / { flush(); open = 1; lib = 1; next }
          open && /Thread \(/ { if ($0 !~ /nvjet|cublasLt|cutlass/) lib = 0 }
          END { flush(); printf "%d %d", no, nl }' "$log")
        how="$how; ${split#* } of them in cuBLASLt kernels, left out"
        n=${split% *}
      fi
      local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b - a}')
      note "$(printf 'san %-10s %-22s %5s errors (%s, %s s)' "$tool" "$name" "$n" "$how" "$dt")"
    }
    TOOLS=${SAN_TOOLS:-memcheck racecheck initcheck synccheck}
    if [[ " $TOOLS " == *" memcheck "* ]]; then
      san memcheck test_kernels 70 ./$B/tests/test_kernels
      san memcheck test_gpu_llm 35 ./$B/tests/test_gpu_llm
      san memcheck test_gpu_flow 35 ./$B/tests/test_gpu_flow
      san memcheck test_gpu_hift 35 ./$B/tests/test_gpu_hift
      COSY_TEST_FILTER=test_gpu_synthesis san memcheck test_gpu_engine 55 ./$B/tests/test_gpu_engine
      COSY_TEST_FE_MODEL=$PWD/$SMALL_FE san memcheck test_gpu_frontend 35 ./$B/tests/test_gpu_frontend
      san memcheck bench_w1_c16_full 70 ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 16 \
        --requests 16 --tokens 60 --warmup 0 --max-active 16 --memory-gb 16 \
        --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
    fi
    # racecheck, initcheck, synccheck: the kernel test (every launcher), the stage tests on the
    # small models; initcheck and synccheck also the engine's synthesis test and W1 at C = 16
    # (racecheck does not finish a whole synthesis within the limits: 140 s were not enough).
    # Limits in s (times SAN_SCALE) per run: kernels llm flow hift engine w1
    for tl in racecheck:60:60:90:90:0:0 initcheck:30:30:40:40:80:90 synccheck:25:25:30:30:40:60; do
      IFS=: read -r tool lk ll lf lh le lw <<< "$tl"
      [[ " $TOOLS " == *" $tool "* ]] || continue
      san $tool test_kernels "$lk" ./$B/tests/test_kernels
      san $tool test_gpu_llm "$ll" ./$B/tests/test_gpu_llm
      san $tool test_gpu_flow "$lf" ./$B/tests/test_gpu_flow
      san $tool test_gpu_hift "$lh" ./$B/tests/test_gpu_hift
      [ "$le" -gt 0 ] && COSY_TEST_FILTER=test_gpu_synthesis san $tool test_gpu_engine "$le" ./$B/tests/test_gpu_engine
      [ "$lw" -gt 0 ] && san $tool bench_w1_c16_full "$lw" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency 16 --requests 16 --tokens 60 --warmup 0 --max-active 16 --memory-gb 16 \
        --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
    done
  fi
fi
if [[ " $STEPS " == *" bench "* ]]; then
  run bench_kernels ./$B/tests/test_kernels --bench
  # BENCH_ARGS: more bench_w1 arguments for the three runs below (e.g. --vocoder-tf32)
  run bench_w1_c1 ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 1 --requests 16 ${BENCH_ARGS:-} \
    --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  # the scheduler under load: W1 at higher concurrency (2*C requests per level) and W2 (offline,
  # W2_N requests of 250 tokens at once); each level also prints batch sizes and GPU util.
  # W1_LEVELS= or W2_N=0 skips one.
  if [ -n "${W1_LEVELS-16,64,128,256}" ]; then
    run bench_w1_scale ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency "${W1_LEVELS-16,64,128,256}" ${BENCH_ARGS:-} \
      --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  fi
  if [ "${W2_N:-256}" -gt 0 ]; then
    run bench_w2 ./$B/bench/bench_w1 -m "$FULL" --device 0 --offline "${W2_N:-256}" ${BENCH_ARGS:-} \
      --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  fi
fi

W1_ARGS=(--texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav")
if [[ " $STEPS " == *" w3 "* ]]; then
  # shellcheck disable=SC2086
  run w3 ./$B/bench/bench_w1 -m "$FULL" --device 0 --users "${W3_USERS:-128,192,256,320,384,448}" \
    --level-s "${W3_LEVEL_S:-40}" --skip "${W3_SKIP_S:-10}" ${W3_ARGS:-} "${W1_ARGS[@]}"
  note "w3: $(grep -E '^W3 headline' "$OUT/w3.log" || echo 'no headline (see w3.log)')"
fi
PROFILES=${PROFILES:-h100 a100 ada rtx5090}
if [[ " $STEPS " == *" prof_tests "* ]]; then
  for p in $PROFILES; do
    export COSY_GPU_PROFILE=$p
    run prof_${p}_test_kernels ./$B/tests/test_kernels
    for t in llm flow hift; do
      COSY_FULL_MODEL=$PWD/$FULL run prof_${p}_test_gpu_$t ./$B/tests/test_gpu_$t
    done
    run prof_${p}_test_gpu_engine ./$B/tests/test_gpu_engine
    run prof_${p}_test_api ./$B/tests/test_api
    unset COSY_GPU_PROFILE
  done
fi
if [[ " $STEPS " == *" prof_w1 "* ]]; then
  for p in $PROFILES; do
    COSY_GPU_PROFILE=$p run prof_${p}_w1_c1 ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --concurrency 1 --requests 16 "${W1_ARGS[@]}"
    COSY_GPU_PROFILE=$p run prof_${p}_w1_c16 ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --concurrency 16 "${W1_ARGS[@]}"
  done
fi
if [[ " $STEPS " == *" memory "* ]]; then
  for gb in ${BUDGETS_GB:-24 32}; do
    run mem_${gb}g_w1_c16 ./$B/bench/bench_w1 -m "$FULL" --device 0 --memory-gb "$gb" \
      --concurrency 16 "${W1_ARGS[@]}"
  done
  COSY_GPU_TEST_MODEL=$PWD/$FULL COSY_GPU_BUDGETS_GB="${BUDGETS_GB:-24 32}" \
    run mem_test_gpu_engine_full ./$B/tests/test_gpu_engine
  # a budget far too small: create fails (rc=1 expected) with the engine's stated need
  for ma in 16 64 256; do
    run mem_need_ma$ma ./$B/bench/bench_w1 -m "$FULL" --device 0 --memory-fraction 0.0001 \
      --max-active $ma --concurrency 1 "${W1_ARGS[@]}"
  done
fi
if [[ " $STEPS " == *" ab "* ]]; then
  # scheduler and vocoder options against the defaults, W1 at C = AB_LEVELS (16,64), each
  # variant AB_ROUNDS (2) times in alternation so that drift shows. AB_VARIANTS: space-separated
  # name[:VAR=value,VAR=value,--flag=value] (docs/knobs.md for the variables; --flag=value
  # entries are bench_w1 arguments, e.g. short:--first-wait=64), default
  #   base  accurate:--vocoder-accurate (3xTF32 vocoder)  voc:COSY_SCHED_VOCODER_THREAD=1
  # Logs: ab_<variant>_<round>.log; the summary gets each run's rows and its "ttfb by wave" line
  AB_VARIANTS=${AB_VARIANTS:-base accurate:--vocoder-accurate voc:COSY_SCHED_VOCODER_THREAD=1}
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for spec in $AB_VARIANTS; do
      variant "$spec"
      run ab_${v}_$round env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency "${AB_LEVELS:-16,64}" "${W1_ARGS[@]}" "${vargs[@]}"
      grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/ab_${v}_$round.log" \
        | sed "s/^ */ab $v $round: /" | tee -a "$SUMMARY"
    done
  done
fi
if [[ " $STEPS " == *" conv "* ]]; then
  COSY_TEST_FILTER='test_kernel_conv*' run conv_test ./$B/tests/test_gpu_hift
  COSY_TEST_FILTER=test_decode_golden run conv_decode ./$B/tests/test_gpu_hift
  grep -hE 'FAIL|DIFFERS|NOT BIT|NOT F16|NOT STAGED|WRONG|LAYOUT' "$OUT/conv_test.log" \
    "$OUT/conv_decode.log" | sed 's/^/conv check: /' | tee -a "$SUMMARY"
  grep -hE 'bit-identical to the old kernel|golden rel L2: F16|waveform digest' \
    "$OUT/conv_decode.log" \
    | sed 's/^ */conv /' | tee -a "$SUMMARY"
  echo "conv staged: $(grep -c 'staged.*bit-identical to conv2' "$OUT/conv_test.log") checks" \
    "bit-identical to conv2, $(grep -c ': staged (' "$OUT/conv_test.log") of them staged;" \
    "$(grep -h 'conv staged: 16 convs' "$OUT/conv_test.log" | sed 's/^ *//')" | tee -a "$SUMMARY"
  run conv_bench ./$B/tests/test_kernels --bench hift
  grep -E '^conv (cmp|sum)' "$OUT/conv_bench.log" | tee -a "$SUMMARY"
fi
if [[ " $STEPS " == *" f16guard "* ]]; then
  COSY_TEST_FILTER=test_f16_guard run f16guard_test ./$B/tests/test_gpu_hift
  COSY_TEST_FILTER='test_kernel_conv*' run f16guard_conv ./$B/tests/test_gpu_hift
  COSY_TEST_FILTER=test_decode_golden run f16guard_decode ./$B/tests/test_gpu_hift
  grep -hE 'FAIL|DIFFER|NOT BIT|NOT F16|WRONG|LAYOUT' "$OUT/f16guard_test.log" \
    "$OUT/f16guard_conv.log" "$OUT/f16guard_decode.log" | sed 's/^/f16guard check: /' \
    | tee -a "$SUMMARY"
  grep -hE 'f16 guard|alone in|unscaled streams|saturation flag|launch of 3 convs|golden rel L2: F16|PASSED|FAILED' \
    "$OUT/f16guard_test.log" "$OUT/f16guard_conv.log" "$OUT/f16guard_decode.log" \
    | sed 's/^ */f16guard: /' | tee -a "$SUMMARY"
  # the F16 conv kernel's time with the flag (the "f16 ..." rows and "f16/tf32 x" of each launch,
  # to hold against the conv step's numbers of bench/RESULTS.md); F16G_BENCH=0 skips it
  if [ "${F16G_BENCH:-1}" != 0 ]; then
    run f16guard_bench ./$B/tests/test_kernels --bench hift
    grep -E '^conv (cmp|sum)' "$OUT/f16guard_bench.log" | sed 's/^/f16guard /' | tee -a "$SUMMARY"
  fi
  for round in $(seq 1 "${F16G_ROUNDS:-1}"); do
    for vp in tf32 fp16; do
      varg=(--vocoder-$vp)
      run f16guard_w2_${vp}_$round ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --offline "${W2_N:-256}" "${W1_ARGS[@]}" "${varg[@]}"
      grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ |vocoder fp16' \
        "$OUT/f16guard_w2_${vp}_$round.log" | sed "s/^ */f16guard w2 $vp $round: /" \
        | tee -a "$SUMMARY"
    done
  done
fi
if [[ " $STEPS " == *" attnsplit "* ]]; then
  run attnsplit_test ./$B/tests/test_kernels attn_dit_paged
  grep -E 'FAIL' "$OUT/attnsplit_test.log" | sed 's/^/attnsplit check: /' | tee -a "$SUMMARY"
  run attnsplit_gpu_flow ./$B/tests/test_gpu_flow # test_batch_cache_split / _auto: split 4, auto
  grep -E 'FAIL' "$OUT/attnsplit_gpu_flow.log" | sed 's/^/attnsplit check: /' | tee -a "$SUMMARY"
  BENCH_FILTER="dit call" run attnsplit_bench ./$B/tests/test_kernels --bench attn_dit_paged
  awk '/^==== kernel table/ { t = 1 } t && /^dit call/' "$OUT/attnsplit_bench.log" \
    | sed 's/^/attnsplit: /' | tee -a "$SUMMARY"
  for spec in ${ATTNSPLIT_VARIANTS:-base split4:COSY_FLOW_ATTN_SPLIT=4 auto:COSY_FLOW_ATTN_SPLIT=auto}; do
    variant "$spec"
    run attnsplit_w1_$v env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --concurrency 16 "${W1_ARGS[@]}" "${vargs[@]}"
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/attnsplit_w1_$v.log" \
      | sed "s/^ */attnsplit $v: /" | tee -a "$SUMMARY"
  done
fi
if [[ " $STEPS " == *" attnv2 "* ]]; then
  run attnv2_test ./$B/tests/test_kernels attn_dit_paged
  grep -E 'FAIL|v2 (64|128)' "$OUT/attnv2_test.log" | sed 's/^/attnv2 check: /' | tee -a "$SUMMARY"
  run attnv2_gpu_flow ./$B/tests/test_gpu_flow # test_batch_cache_v2: COSY_FLOW_ATTN_V2 64, 128
  grep -E 'FAIL|attention v2' "$OUT/attnv2_gpu_flow.log" | sed 's/^/attnv2 check: /' \
    | tee -a "$SUMMARY"
  run attnv2_bench ./$B/tests/test_kernels --bench attn_dit_paged
  awk '/^==== kernel table/ { t = 1 } t && /attn_dit/' "$OUT/attnv2_bench.log" \
    | sed 's/^/attnv2: /' | tee -a "$SUMMARY"
  for spec in ${ATTNV2_VARIANTS:-base v2_64:COSY_FLOW_ATTN_V2=64 v2_128:COSY_FLOW_ATTN_V2=128 \
                                v2_auto:COSY_FLOW_ATTN_V2=auto}; do
    variant "$spec"
    # W2 (offline: the loaded flow batches where this kernel is ~13% of the GPU time), then W1
    run attnv2_w2_$v env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --offline "${W2_N:-256}" "${W1_ARGS[@]}" "${vargs[@]}"
    grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$OUT/attnv2_w2_$v.log" \
      | sed "s/^ */attnv2 $v w2: /" | tee -a "$SUMMARY"
    run attnv2_w1_$v env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --concurrency 16 "${W1_ARGS[@]}" "${vargs[@]}"
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/attnv2_w1_$v.log" \
      | sed "s/^ */attnv2 $v: /" | tee -a "$SUMMARY"
  done
fi
if [[ " $STEPS " == *" ff1epi "* ]]; then
  # the flow's ff1 with cuBLASLt's bias + GELU epilogue: test_kernels gemm (cosy_k_gemm_gelu vs
  # double, which tier cuBLASLt took), test_gpu_flow on the small golden model and the full-size
  # random one under each variant of FF1_VARIANTS (ab syntax), then W1 at C = 16 under each
  run ff1epi_test ./$B/tests/test_kernels gemm
  grep -E 'FAIL|^gemm_gelu' "$OUT/ff1epi_test.log" | sed 's/^/ff1epi check: /' | tee -a "$SUMMARY"
  for fam in dit_elementwise flow_pack; do # the flow's elementwise launchers, pdl where it exists
    run ff1epi_test_$fam ./$B/tests/test_kernels $fam
    grep -E 'FAIL' "$OUT/ff1epi_test_$fam.log" | sed 's/^/ff1epi check: /' | tee -a "$SUMMARY"
  done
  for spec in ${FF1_VARIANTS:-base pdl:COSY_FLOW_PDL=1}; do
    variant "$spec"
    COSY_FULL_MODEL=$PWD/$FULL run ff1epi_gpu_flow_$v env "${envs[@]}" ./$B/tests/test_gpu_flow
    grep -E 'FAILED|ff1 bias|TIMING' "$OUT/ff1epi_gpu_flow_$v.log" | sed "s/^ */ff1epi $v: /" \
      | tee -a "$SUMMARY"
    run ff1epi_w1_$v env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
      --concurrency 16 "${W1_ARGS[@]}" "${vargs[@]}"
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/ff1epi_w1_$v.log" \
      | sed "s/^ */ff1epi $v w1: /" | tee -a "$SUMMARY"
  done
fi
if [[ " $STEPS " == *" attnpre "* ]]; then
  # the decode attention's early loads (COSY_LLM_ATTN_EARLY; kernels/attention.cu), see the header
  run attnpre_test ./$B/tests/test_kernels attention
  grep -E 'FAIL|\[early pdl\]' "$OUT/attnpre_test.log" | sed 's/^/attnpre check: /' \
    | tee -a "$SUMMARY"
  note "attnpre check: $(grep -c '\[early' "$OUT/attnpre_test.log") early-load checks, $(grep -c \
    'FAIL' "$OUT/attnpre_test.log") FAIL"
  # the kernel table's pairs q|k|v projection -> attention, without and with the flag
  BENCH_FILTER="qkv+attn" run attnpre_bench ./$B/tests/test_kernels --bench attention
  awk '/^==== kernel table/ { t = 1 } t && /qkv\+attn/' "$OUT/attnpre_bench.log" \
    | sed 's/^/attnpre: /' | tee -a "$SUMMARY"
  for e in off on; do
    ae=(COSY_LLM_ATTN_EARLY=0); [ $e = on ] && ae=(COSY_LLM_ATTN_EARLY=1)
    COSY_FULL_MODEL=$PWD/$FULL run attnpre_llm_$e env "${ae[@]}" ./$B/tests/test_gpu_llm
    note "attnpre $e llm: $(grep -cE '^\[ +OK +\]' "$OUT/attnpre_llm_$e.log") ok, $(grep -cE \
      '^\[ +FAILED +\]' "$OUT/attnpre_llm_$e.log") failed"
    note "attnpre $e steps: $(grep -E 'TIMING llm decode step batch' "$OUT/attnpre_llm_$e.log" | \
      grep 'tensor-core gemv + PDL' | awk '{print "b" $6 " " $7}' | paste -sd' ')"
  done
  COSY_TEST_FILTER=test_gpu_synthesis COSY_GPU_TEST_MODEL=$PWD/$FULL COSY_LLM_ATTN_EARLY=1 \
    run attnpre_engine_on ./$B/tests/test_gpu_engine
  grep -E 'batch-invariant LLM|FAILED' "$OUT/attnpre_engine_on.log" | sed 's/^/attnpre on engine: /' \
    | tee -a "$SUMMARY"
  for r in $(seq 1 "${ATTNPRE_ROUNDS:-2}"); do
    for e in off on; do
      ae=(COSY_LLM_ATTN_EARLY=0); [ $e = on ] && ae=(COSY_LLM_ATTN_EARLY=1)
      run attnpre_w1_${e}_$r env "${ae[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency 1 "${W1_ARGS[@]}"
      note "attnpre $e w1 $r: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms' "$OUT/attnpre_w1_${e}_$r.log" | \
        awk '{print "C=" $1 " " $3 "/" $4 " rtf " $5 " " $7 "x u" $8}' | paste -sd';')"
    done
  done
fi
if [[ " $STEPS " == *" tc "* ]]; then
  run tc_test_kernels ./$B/tests/test_kernels llm_gemv
  for spec in ${TC_VARIANTS:-base}; do
    variant "$spec"
    ( export "${envs[@]}" _=1
      BENCH_FILTER=gemv run tc_${v}_bench_gemv ./$B/tests/test_kernels --bench llm_gemv
      COSY_FULL_MODEL=$PWD/$FULL run tc_${v}_gpu_llm ./$B/tests/test_gpu_llm
      COSY_LLM_DECODE=mixed run tc_${v}_w1_mixed ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency "${TC_LEVELS:-1,16,32,64}" "${W1_ARGS[@]}"
      COSY_LLM_DECODE=tc run tc_${v}_w1_tc ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency "${TC_LEVELS:-1,16,32,64}" "${W1_ARGS[@]}" )
    note "tc $v steps: $(grep -E 'TIMING llm decode step' "$OUT/tc_${v}_gpu_llm.log" | \
      grep 'tensor-core gemv + PDL' | awk '{print "b" $6 " " $7}' | paste -sd' ')"
    for mode in mixed tc; do
      note "tc $v $mode: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms' "$OUT/tc_${v}_w1_$mode.log" | \
        awk '{print "C=" $1 " " $3 "/" $4 " rtf " $5 " " $7 "x u" $8}' | paste -sd';')"
    done
  done
fi
if [[ " $STEPS " == *" tcbshape "* ]]; then # not in the default steps: bash bench/device_run.sh build tcbshape
  run tcbshape_test_kernels ./$B/tests/test_kernels llm_gemv
  grep -E 'FAIL' "$OUT/tcbshape_test_kernels.log" | sed 's/^/tcbshape check: /' | tee -a "$SUMMARY"
  note "tcbshape check: $(grep -c 'PASS$' "$OUT/tcbshape_test_kernels.log") checks passed, $(grep -c 'FAIL$' "$OUT/tcbshape_test_kernels.log") failed"
  BENCH_FILTER=gemv_tcb BENCH_TCB_SHAPES=1 run tcbshape_bench ./$B/tests/test_kernels --bench llm_gemv
  # per (rows, matrix): the rule's row, then shapes 1 / 2 / 3 (us under graph replay)
  awk '/^==== kernel table/ { t = 1 }
       t && $1 == "llm" && $3 == "gemv_tcb" {
         m = $4; s = "rule"
         if ($4 == "shape") { s = $5; m = $6 }
         sub(/^rmsnorm\+/, "", m); sub(/\+.*$/, "", m)
         for (i = 5; i <= NF; i++) if ($i ~ /x\/y$/) { v = $(i + 1); break }
         k = $2 " " m; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
         val[k, s] = v
       }
       END { for (i = 1; i <= n; i++) { k = order[i]
               printf "tcbshape %s: %s / %s / %s / %s\n", k, val[k, "rule"], val[k, "1"], val[k, "2"], val[k, "3"] } }' \
    "$OUT/tcbshape_bench.log" | tee -a "$SUMMARY"
  COSY_FULL_MODEL=$PWD/$FULL COSY_TEST_FILTER=test_full run tcbshape_gpu_llm ./$B/tests/test_gpu_llm
  note "tcbshape steps: $(grep -E 'TIMING llm decode step' "$OUT/tcbshape_gpu_llm.log" | \
    grep 'tensor-core gemv + PDL' | awk '{print "b" $6 " " $7}' | paste -sd' ')"
fi

if [[ " $STEPS " == *" xfrag "* ]]; then # not in the default steps: bash bench/device_run.sh build xfrag
  run xfrag_test ./$B/tests/test_kernels llm_gemv
  grep -E 'FAIL' "$OUT/xfrag_test.log" | sed 's/^/xfrag check: /' | tee -a "$SUMMARY"
  note "xfrag: test_kernels llm_gemv: $(grep -c 'llm_gemv_tc xfrag .*PASS' "$OUT/xfrag_test.log") xfrag == per-warp checks PASS ($(grep -c 'in-block vs per-warp.*PASS' "$OUT/xfrag_test.log") of them on the in-block path), $(grep -cE 'xfrag.*PASS' "$OUT/xfrag_test.log") xfrag lines PASS, $(grep -c FAIL "$OUT/xfrag_test.log") FAIL"
  # XFRAG_VARIANTS (default "base xf"): xf = COSY_LLM_XFRAG=1, xf2 = COSY_LLM_XFRAG=2 (not
  # staging x), base = COSY_LLM_XFRAG=0, auto = unset (the default). test_gpu_llm on the small
  # model (golden, batched, prefill, KV) and the full one (its checks and the decode-step
  # timings) under each: must pass
  xfenv() { case $1 in xf) echo COSY_LLM_XFRAG=1 ;; xf2) echo COSY_LLM_XFRAG=2 ;; auto) echo _XF=0 ;; *) echo COSY_LLM_XFRAG=0 ;; esac; }
  XFV=${XFRAG_VARIANTS:-base xf}
  for v in $XFV; do
    COSY_FULL_MODEL=$PWD/$FULL run xfrag_gpu_llm_$v env "$(xfenv $v)" ./$B/tests/test_gpu_llm
    L=$OUT/xfrag_gpu_llm_$v.log
    grep -E ' FAIL$' "$L" | sed "s/^/xfrag check: gpu_llm $v: /" | tee -a "$SUMMARY"
    note "xfrag $v gpu_llm: $(grep -cE ' PASS$' "$L") checks PASS, $(grep -cE ' FAIL$' "$L") FAIL; $(grep -E '^\[ +(PASSED|FAILED) +\]' "$L" | paste -sd' ')"
  done
  # the kernel table: gemv_tc / gemv_tc xfrag / gemv_tc xfrag2 at b1, nosplit / nosplit xfrag at b16
  BENCH_FILTER=gemv_tc run xfrag_bench ./$B/tests/test_kernels --bench llm_gemv
  awk '/^==== kernel table/ { t = 1 } t && /^llm b(1|16) / && /gemv_tc/' "$OUT/xfrag_bench.log" \
    | sed 's/^/xfrag bench: /' | tee -a "$SUMMARY"
  for v in $XFV; do # test_gpu_llm's decode steps on the tensor-core path (ms a step)
    note "xfrag $v steps: $(grep -E 'TIMING llm decode step' "$OUT/xfrag_gpu_llm_$v.log" | \
      grep 'tensor-core gemv + PDL' | awk '{print "b" $6 " " $7}' | paste -sd' ')"
  done
  # W1 at C = 1, the variants in alternation, XFRAG_ROUNDS (2) times
  for round in $(seq 1 "${XFRAG_ROUNDS:-2}"); do
    for v in $XFV; do
      run xfrag_w1_${v}_$round env "$(xfenv $v)" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency 1 "${W1_ARGS[@]}"
      grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|underruns:' "$OUT/xfrag_w1_${v}_$round.log" \
        | sed "s/^ */xfrag $v $round w1: /" | tee -a "$SUMMARY"
    done
  done
fi

if [[ " $STEPS " == *" gemvb "* ]]; then
  # the B-operand decode GEMV (COSY_LLM_GEMVB=1) against the default kernel: correctness first
  run gemvb_test_kernels ./$B/tests/test_kernels llm_gemv
  grep -E 'FAIL' "$OUT/gemvb_test_kernels.log" | sed 's/^/gemvb check: /' | tee -a "$SUMMARY"
  note "gemvb check: $(grep -c 'llm_gemv_tcb.*PASS' "$OUT/gemvb_test_kernels.log") llm_gemv_tcb checks passed, $(grep -c 'llm_gemv_tcb.*FAIL' "$OUT/gemvb_test_kernels.log") failed"
  for v in base b; do
    envs=(COSY_LLM_GEMVB=0); [ "$v" = b ] && envs=(COSY_LLM_GEMVB=1)
    run gemvb_${v}_gpu_llm env "${envs[@]}" COSY_FULL_MODEL=$PWD/$FULL ./$B/tests/test_gpu_llm
    grep -E 'FAIL' "$OUT/gemvb_${v}_gpu_llm.log" | sed "s/^/gemvb check $v gpu_llm: /" | tee -a "$SUMMARY"
    note "gemvb $v steps: $(grep -E 'TIMING llm decode step' "$OUT/gemvb_${v}_gpu_llm.log" | \
      grep 'tensor-core gemv + PDL' | awk '{print "b" $6 " " $7}' | paste -sd' ')"
  done
  COSY_LLM_GEMVB=1 COSY_GPU_TEST_MODEL=$PWD/$FULL COSY_TEST_FILTER=test_gpu_synthesis \
    run gemvb_b_gpu_engine ./$B/tests/test_gpu_engine
  grep -E 'batch-invariant LLM|FAIL|\[  FAILED' "$OUT/gemvb_b_gpu_engine.log" \
    | sed 's/^/gemvb engine: /' | tee -a "$SUMMARY"
  BENCH_FILTER=gemv_tc run gemvb_bench ./$B/tests/test_kernels --bench llm_gemv
  awk '/^==== kernel table/ { t = 1 } t && /^llm b(16|64) +gemv_tcb? [^n]/' "$OUT/gemvb_bench.log" \
    | sed 's/^/gemvb: /' | tee -a "$SUMMARY"
  for r in $(seq 1 "${GEMVB_ROUNDS:-1}"); do
    for v in base b; do
      envs=(COSY_LLM_GEMVB=0); [ "$v" = b ] && envs=(COSY_LLM_GEMVB=1)
      run gemvb_${v}_${r}_w1 env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --concurrency 16,64 "${W1_ARGS[@]}"
      grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/gemvb_${v}_${r}_w1.log" \
        | sed "s/^ */gemvb $v $r w1: /" | tee -a "$SUMMARY"
      run gemvb_${v}_${r}_w2 env "${envs[@]}" ./$B/bench/bench_w1 -m "$FULL" --device 0 \
        --offline "${W2_N:-256}" "${W1_ARGS[@]}"
      grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$OUT/gemvb_${v}_${r}_w2.log" \
        | sed "s/^ */gemvb $v $r w2: /" | tee -a "$SUMMARY"
    done
  done
fi

if [[ " $STEPS " == *" trace "* ]]; then
  # W1 at C = TRACE_LEVEL (64) with the scheduler trace (COSY_SCHED_TRACE) under each variant of
  # TRACE_VARIANTS (the ab step's syntax, default "base"), TRACE_ARGS more bench_w1 arguments;
  # bench/trace_summary.py's table of each goes to the summary. Logs: trace_<variant>.log,
  # trace_<variant>.txt
  for spec in ${TRACE_VARIANTS:-base}; do
    variant "$spec"
    run trace_$v env "${envs[@]}" COSY_SCHED_TRACE="$OUT/trace_$v.txt" ./$B/bench/bench_w1 \
      -m "$FULL" --device 0 --concurrency "${TRACE_LEVEL:-64}" ${TRACE_ARGS:-} "${W1_ARGS[@]}" "${vargs[@]}"
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|ttfb by wave|underruns:' "$OUT/trace_$v.log" | sed "s/^ */trace $v: /" \
      | tee -a "$SUMMARY"
    python3 bench/trace_summary.py "$OUT/trace_$v.txt" | sed "s/^/trace $v: /" | tee -a "$SUMMARY"
  done
fi
if [[ " $STEPS " == *" multi "* ]]; then # not in the default steps: bash bench/device_run.sh build multi
  n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$n_gpu" -lt 2 ]; then
    note "multi: SKIP ($n_gpu GPU(s) visible; two are needed)"
  else
    nvidia-smi -L > "$OUT/multi_gpus.txt" 2>&1
    # device 1 on its own: the parity tests against the CPU reference and the golden data
    CUDA_VISIBLE_DEVICES=1 run multi_dev1_test_kernels ./$B/tests/test_kernels
    for t in llm flow hift; do
      CUDA_VISIBLE_DEVICES=1 COSY_FULL_MODEL=$PWD/$FULL run multi_dev1_test_gpu_$t ./$B/tests/test_gpu_$t
    done
    CUDA_VISIBLE_DEVICES=1 run multi_dev1_test_gpu_engine ./$B/tests/test_gpu_engine
    # both: device 1 == device 0, and one engine per device serving at once == each alone
    COSY_TEST_FILTER=test_two_devices run multi_test_two_devices ./$B/tests/test_gpu_engine
    L=$OUT/multi_test_two_devices.log
    note "multi two devices: $(grep -cE 'diff( to alone)? 0 \(must be 0\)' "$L") of $(grep -c 'must be 0' "$L") comparisons exact (6 expected)$(grep -m1 -oE 'SKIP.*|different GPUs.*' "$L" | sed 's/^/; /')"
    # W1: one GPU at C = 64 against two at C = 128 (one engine per GPU, 64 clients each)
    run multi_w1_c64_1gpu ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 64 "${W1_ARGS[@]}"
    run multi_w1_c128_2gpu ./$B/bench/bench_w1 -m "$FULL" --device 0,1 --concurrency 128 "${W1_ARGS[@]}"
    # the level's row (C xRT ttfb_p95) of each; then the verdict
    r1=$(awk '$1 == 64 && $4 ~ /ms$/ { print $7, $4; exit }' "$OUT/multi_w1_c64_1gpu.log")
    r2=$(awk '$1 == 128 && $4 ~ /ms$/ { print $7, $4; exit }' "$OUT/multi_w1_c128_2gpu.log")
    note "multi W1 1 GPU  C=64 : $(grep -A1 -E '^ +C +' "$OUT/multi_w1_c64_1gpu.log" | tail -1)"
    note "multi W1 2 GPUs C=128: $(grep -A3 -E '^ +C +' "$OUT/multi_w1_c128_2gpu.log" | tail -3 | tr -s ' ' | paste -sd'|')"
    note "multi $(grep -E 'gpu util (e[01]|all):' "$OUT/multi_w1_c128_2gpu.log" | sed -E 's/ +/ /g; s/ \(.*//' | paste -sd';')"
    note "$(awk -v a="$r1" -v b="$r2" 'BEGIN {
      split(a, x, " "); split(b, y, " "); sub(/ms$/, "", x[2]); sub(/ms$/, "", y[2]);
      if (x[1] == "" || y[1] == "" || x[1] <= 0) { print "multi: no W1 rows to compare (see multi_w1_*.log)"; exit }
      r = y[1] / x[1];
      printf "multi: xRT 2 GPUs C=128 %.2f / 1 GPU C=64 %.2f = %.2fx (target >= 1.9: %s); TTFB p95 %.1f ms vs %.1f ms (target no worse, 5%% margin: %s)",
        y[1], x[1], r, (r >= 1.9) ? "PASS" : "FAIL", y[2], x[2], (y[2] <= 1.05 * x[2]) ? "PASS" : "FAIL" }')"
    if [ "${MULTI_SERVE:-1}" != 0 ]; then
      # cut at MULTI_SERVE_S (default 270) seconds so that the step fits one 10-minute call
      OUT=$OUT NO_INPROC=1 run multi_serve timeout -k 10 "${MULTI_SERVE_S:-270}" \
        bash bench/serve_device_run.sh "$FULL" multi
      [ -f "$OUT/serve/summary.txt" ] && sed 's/^/  serve: /' "$OUT/serve/summary.txt" | tee -a "$SUMMARY"
    fi
  fi
fi
if [[ " $STEPS " == *" wheel "* ]]; then # not in the default steps: bash bench/device_run.sh build wheel
  OUT=$OUT run wheel bash bench/wheel_device_run.sh "$FULL" ${WHEEL_STEPS:-}
  [ -f "$OUT/wheel/summary.txt" ] && tee -a "$SUMMARY" < "$OUT/wheel/summary.txt"
fi
if [[ " $STEPS " == *" sched "* ]]; then
  # the scheduler under a burst and under a ramp, with a trace of every backend call
  # (COSY_SCHED_TRACE) and, where nsys exists, the per-kernel GPU time of a C = 64 burst;
  # streaming vs non-streaming GPU time per request at C = 1 (--one-shot)
  W1A=(-m "$FULL" --device 0 --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav")
  run sched_c1_stream ./$B/bench/bench_w1 "${W1A[@]}" --concurrency 1 --requests 16
  run sched_c1_oneshot ./$B/bench/bench_w1 "${W1A[@]}" --concurrency 1 --requests 16 --one-shot
  COSY_SCHED_TRACE=$OUT/trace_burst.txt run sched_burst ./$B/bench/bench_w1 "${W1A[@]}" \
    --concurrency ${SCHED_LEVELS:-16,64}
  COSY_SCHED_TRACE=$OUT/trace_ramp.txt run sched_ramp ./$B/bench/bench_w1 "${W1A[@]}" \
    --concurrency ${SCHED_LEVELS:-16,64} --ramp 4.48 --requests ${RAMP_REQS:-256}
  if command -v nsys > /dev/null && [ -z "${NO_NSYS:-}" ]; then
    run nsys_c64 timeout 240 nsys profile -t cuda -s none --cpuctxsw=none -o "$OUT/nsys_c64" \
      --force-overwrite true ./$B/bench/bench_w1 "${W1A[@]}" --concurrency 64
    nsys stats -r cuda_gpu_kern_sum --format csv -o "$OUT/nsys_c64" "$OUT/nsys_c64.nsys-rep" \
      > "$OUT/nsys_stats.log" 2>&1
    rm -f "$OUT/nsys_c64.nsys-rep" "$OUT/nsys_c64.sqlite"
  fi
fi
if [[ " $STEPS " == *" longtext "* ]]; then
  # long text: bench/text/en.txt (one ~1000-character paragraph) is split into segments that one
  # request speaks in turn (112 tokens forced per segment); bench_w1's underrun count shows
  # whether playback started at the first chunk would stall at a segment boundary
  run longtext_w1 ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 1,16 \
    --texts bench/text/en.txt --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  # then with DEFAULT parameters (min/max_tokens 0: every segment may take 20 speech tokens per
  # text token, and the random model nearly always runs to that ceiling) the ~2,000-character
  # paragraph of bench/text/en_long.txt (eight sentences said twice: six segments of 25-80
  # tokens), from the full-size model with the wetext grammars and without, with a 3 s (75
  # tokens) and a 30 s (750 tokens: bench_w1 --prompt-tokens repeats the wav) voice, at C = 1 (1
  # request) and C = 16 (16 requests), one warm-up request each. Each segment reserves its
  # ceiling at admission (docs/scheduler.md section 8): before the GPU flow held 8000 frames per
  # utterance every request failed at once ("... the GPU flow holds at most 3000 (60 s) per
  # utterance"). PASS: no request failed, no underrun. The models: $B/full-nogram.gguf
  # (make_model.py --no-text-grammars) and $B/full-gram.gguf (--wetext .dev/wetext: the four
  # grammar files of the wetext 0.1.8 wheel, 14 MB, which the device lacks; make them here with
  #   d=$(python3 -c "import importlib.util as u, os; print(os.path.join(os.path.dirname(
  #       u.find_spec('wetext').origin), 'fsts'))"); mkdir -p .dev/wetext &&
  #   (cd "$d" && cp --parents zh/tn/tagger.fst zh/tn/verbalizer.fst en/tn/tagger.fst \
  #    en/tn/verbalizer.fst "$OLDPWD/.dev/wetext/")
  # and carry .dev/wetext; without it the grammar rows say MISSING; full-nogram is the build
  # step's model when this machine has no wetext, which makes it without grammars).
  # LT_MODELS ("gram nogram"), LT_VOICES ("75 750") and LT_LEVELS ("1 16") pick a subset. About 6 minutes after the build
  # and the two models on an H200 (estimated: ~400 s of audio per request at RTF ~0.03 at C = 1
  # and ~190x at C = 16). Logs: lt_<model>_<voice>_c<C>.log; a PASS/FAIL table in the summary.
  LT_TABLE=()
  for lm in ${LT_MODELS:-gram nogram}; do
    mf=$B/full-$lm.gguf
    if [ ! -f "$mf" ]; then
      if [ "$lm" = gram ]; then
        if [ -f .dev/wetext/en/tn/tagger.fst ]; then
          run make_full_gram python3 tools/make_model.py --preset full -o "$mf" \
            --tokenizer "$SHARED/tokenizer" --wetext .dev/wetext
        fi
      elif [ -f "$FULL" ] && ! python3 -c "import importlib.util as u, sys
sys.exit(u.find_spec('wetext') is None)" 2> /dev/null; then
        ln -sf "$(basename "$FULL")" "$mf" # the build step's model: no wetext here, no grammars
      else
        run make_full_nogram python3 tools/make_model.py --preset full -o "$mf" \
          --tokenizer "$SHARED/tokenizer" --no-text-grammars
      fi
    fi
    for vt in ${LT_VOICES:-75 750}; do
      for c in ${LT_LEVELS:-1 16}; do
        name=lt_${lm}_${vt}_c$c
        if [ ! -f "$mf" ]; then
          why="the model could not be made: $OUT/make_full_$lm.log"
          [ "$lm" = gram ] && [ ! -f .dev/wetext/en/tn/tagger.fst ] && why="carry .dev/wetext"
          LT_TABLE+=("$(printf '%-7s %5s %4s %5s %4s %9s %10s %9s  %s' "$lm" "$vt" "$c" "-" "-" "-" "-" "-" \
            "MISSING ($why)")")
          continue
        fi
        run "$name" ./$B/bench/bench_w1 -m "$mf" --device 0 --concurrency "$c" --requests "$c" \
          --warmup 1 --tokens default --prompt-tokens "$vt" --texts bench/text/en_long.txt \
          --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
        rc=$?
        L=$OUT/$name.log
        # the level's row: C reqs ttfb_p50 ttfb_p95 rtf_p50 rtf_p95 xRT underrun chars/s mem
        row=$(awk -v c="$c" '$1 == c && $3 ~ /ms$/ { print; exit }' "$L")
        under=$(echo "$row" | awk '{ print $8 }')
        failed=$(grep -oE '[0-9]+ of [0-9]+ requests failed' "$L" | head -1)
        audio=$(grep -oE 'audio [0-9.]+ s' "$L" | head -1 | awk '{ print $2 }')
        verdict=PASS
        [ "$rc" = 0 ] && [ -n "$row" ] && [ "$under" = 0 ] && [ -z "$failed" ] || verdict=FAIL
        why=""
        [ "$rc" != 0 ] && why="rc=$rc "
        [ -n "$under" ] && [ "$under" != 0 ] && why="${why}underruns "
        [ -n "$failed" ] && why="$why$failed: $(grep -m1 -E '^request [0-9]+:|^submit:' "$L" | cut -c1-160)"
        LT_TABLE+=("$(printf '%-7s %5s %4s %5s %4s %9s %10s %9s  %s %s' "$lm" "$vt" "$c" \
          "$(echo "$row" | awk '{ print $2 }')" "${under:--}" "${audio:--}" \
          "$(echo "$row" | awk '{ print $4 }')" "$(echo "$row" | awk '{ print $7 }')" "$verdict" "$why")")
      done
    done
  done
  note "longtext, default parameters, bench/text/en_long.txt ($(wc -c < bench/text/en_long.txt) bytes):"
  note "$(printf '%-7s %5s %4s %5s %4s %9s %10s %9s  %s' model voice C reqs undr audio/req_s ttfb_p95 xRT verdict)"
  for l in "${LT_TABLE[@]}"; do note "$l"; done
  note "longtext: $(printf '%s\n' "${LT_TABLE[@]}" | grep -c ' PASS') PASS, $(printf '%s\n' "${LT_TABLE[@]}" | grep -cE ' FAIL| MISSING') FAIL or MISSING of ${#LT_TABLE[@]}"
fi
if [[ " $STEPS " == *" gputime "* ]]; then
  # the streaming budget (1.3x one-shot) on GPU time, not wall time: bench/kernel_time.c (CUPTI, preloaded)
  # sums the kernels' durations and the time the GPU had any kernel running ("busy"); two runs of
  # GT_A and GT_B requests at C = 1 (2 warm-ups each) are subtracted, so engine creation and
  # warm-up cancel: (B - A) / (GT_B - GT_A) is the GPU time of one utterance, streaming (default
  # chunk schedule, cached flow, streaming vocoder) and --one-shot (one full-attention flow call,
  # one vocoder call)
  kernel_time_so
  W1G=(-m "$FULL" --device 0 --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav")
  for mode in stream oneshot; do
    extra=(); [ $mode = oneshot ] && extra=(--one-shot)
    for n in ${GT_A:-4} ${GT_B:-12}; do
      LD_PRELOAD=$PWD/$B/kernel_time.so run gputime_${mode}_$n ./$B/bench/bench_w1 "${W1G[@]}" \
        --concurrency 1 --requests $n --warmup 2 "${extra[@]}"
    done
  done
  python3 - "$OUT" "${GT_A:-4}" "${GT_B:-12}" <<'PYEOF' | tee -a "$SUMMARY"
import re, sys
out, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def read(mode, n):
    m = re.search(r"kernel_time: (\d+) kernels, sum ([\d.]+) ms, busy ([\d.]+) ms",
                  open(f"{out}/gputime_{mode}_{n}.log").read())
    return None if not m else (int(m[1]), float(m[2]), float(m[3]))
per = {}
for mode in ("stream", "oneshot"):
    x, y = read(mode, a), read(mode, b)
    if not x or not y:
        print(f"gputime {mode}: no kernel_time line"); continue
    per[mode] = [(y[i] - x[i]) / (b - a) for i in range(3)]
    k, s, u = per[mode]
    print(f"gputime {mode}: per utterance {k:.0f} kernels, kernel sum {s:.2f} ms, GPU busy {u:.2f} ms")
if len(per) == 2:
    print("gputime streaming / one-shot: kernel sum %.3f, GPU busy %.3f" %
          (per["stream"][1] / per["oneshot"][1], per["stream"][2] / per["oneshot"][2]))
PYEOF
fi
if [[ " $STEPS " == *" ktop "* ]]; then
  # where the GPU time goes under load: bench_w1 under kernel_time.so with KERNEL_TIME_TOP=KTOP_N (30),
  # one run per ;-separated argument list of KTOP_RUNS (default: a burst of 64 first chunks
  # (--tokens 41: the first chunk, then a 3-token last one) and W1 at C = 64), with KTOP_ENV
  # (e.g. COSY_LLM_DECODE=mixed) in the environment. Logs: ktop_<i>.log (the table is on stderr)
  kernel_time_so
  IFS=';' read -r -a kruns <<< "${KTOP_RUNS:---concurrency 64 --requests 64 --tokens 41;--concurrency 64}"
  for i in "${!kruns[@]}"; do
    read -r -a kargs <<< "${kruns[$i]}"
    run ktop_$i env ${KTOP_ENV:-} LD_PRELOAD=$PWD/$B/kernel_time.so KERNEL_TIME_TOP=${KTOP_N:-30} ./$B/bench/bench_w1 \
      -m "$FULL" --device 0 "${W1_ARGS[@]}" "${kargs[@]}"
    note "ktop $i: ${kruns[$i]}"
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ms|kernel_time' "$OUT/ktop_$i.log" | sed "s/^/ktop $i: /" | tee -a "$SUMMARY"
  done
fi
if [[ " $STEPS " == *" flowsmall "* ]]; then
  run flowsmall_algos env BENCH_GEMM_ALGOS=2 ./$B/tests/test_kernels --bench gemm
  grep -E "engine|search  0:" "$OUT/flowsmall_algos.log" | sed 's/^/flowsmall algos: /' | tee -a "$SUMMARY"
  run flowsmall_bench env BENCH_FILTER="dit " ./$B/tests/test_kernels --bench
  awk '/^==== kernel table/ { t = 1 } t && /^dit (116|call)/' "$OUT/flowsmall_bench.log" | cut -c1-110 \
    | sed 's/^/flowsmall: /' | tee -a "$SUMMARY"
  kernel_time_so
  run flowsmall_ktop env LD_PRELOAD=$PWD/$B/kernel_time.so KERNEL_TIME_TOP=70 ./$B/bench/bench_w1 \
    -m "$FULL" --device 0 --concurrency 1 --requests 16 "${W1_ARGS[@]}"
  grep -E 'kernel_time' "$OUT/flowsmall_ktop.log" | head -26 | sed 's/^/flowsmall ktop: /' | tee -a "$SUMMARY"
  run flowsmall_trace env COSY_SCHED_TRACE="$OUT/flowsmall_trace.txt" ./$B/bench/bench_w1 \
    -m "$FULL" --device 0 --concurrency 1 "${W1_ARGS[@]}"
  python3 bench/trace_summary.py --timeline 1 "$OUT/flowsmall_trace.txt" | sed 's/^/flowsmall trace: /' \
    | tee -a "$SUMMARY"
fi
if [[ " $STEPS " == *" w2prof "* ]]; then
  run w2prof_trace env COSY_SCHED_TRACE="$OUT/w2prof_trace.txt" COSY_FLOW_TIMING="$OUT/w2prof_flowt.txt" \
    ./$B/bench/bench_w1 -m "$FULL" --device 0 --offline 256 "${W1_ARGS[@]}"
  grep -E '^ +256 ' "$OUT/w2prof_trace.log" | sed 's/^/w2prof: /' | tee -a "$SUMMARY"
  python3 bench/trace_summary.py "$OUT/w2prof_trace.txt" > "$OUT/w2prof_trace_sum.txt" 2>&1
  head -8 "$OUT/w2prof_trace_sum.txt" | sed 's/^/w2prof trace: /' | tee -a "$SUMMARY"
  xz -9f "$OUT/w2prof_trace.txt"
  kernel_time_so
  run w2prof_ktop env LD_PRELOAD=$PWD/$B/kernel_time.so KERNEL_TIME_TOP=60 ./$B/bench/bench_w1 \
    -m "$FULL" --device 0 --offline 256 "${W1_ARGS[@]}"
  grep -E 'kernel_time' "$OUT/w2prof_ktop.log" | head -21 | cut -c1-150 | sed 's/^/w2prof ktop: /' \
    | tee -a "$SUMMARY"
  run w2prof_stream_build make -j"${JOBS:-$(nproc)}" B=$B SHARED_DIR="$SHARED" CUDA=1 CUDA_ARCHS="$ARCH" \
    "$B/bench/gemv_stream"
  run w2prof_stream ./$B/bench/gemv_stream
  grep -E 'D4 (rows|frag)' "$OUT/w2prof_stream.log" | sed 's/^/w2prof stream: /' | tee -a "$SUMMARY"
fi
if [[ " $STEPS " == *" frontend "* ]]; then
  if [ ! -f "$FULL_FE" ]; then
    run make_full_fe python3 tools/make_model.py --preset full --frontend full -o "$FULL_FE" \
      --tokenizer "$SHARED/tokenizer"
  fi
  COSY_TEST_FE_MODEL=$PWD/$SMALL_FE COSY_FULL_FE_MODEL=$PWD/$FULL_FE \
    run test_gpu_frontend ./$B/tests/test_gpu_frontend
  COSY_TEST_FE_MODEL=$PWD/$SMALL_FE run test_voice_audio ./$B/tests/test_voice_audio
  run bench_voice_gpu ./$B/bench/bench_voice -m "$FULL_FE" --device 0 --seconds 10 --repeat 10 \
    --beside --wav "$SHARED/audio/zero_shot_prompt.wav"
  if [ "${FE_CPU:-1}" != 0 ]; then
    run bench_voice_cpu timeout 600 ./$B/bench/bench_voice -m "$FULL_FE" --seconds 10 --repeat 1 \
      --wav "$SHARED/audio/zero_shot_prompt.wav"
  fi
fi

if [[ " $STEPS " == *" profile "* ]]; then
  # per-kernel device time of a few decode steps inside a W1 request (ncu serializes kernels, so
  # programmatic-launch overlap is not seen here; bench_w1 gives the real step time)
  run ncu_w1 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip ${NCU_SKIP:-9000} --launch-count ${NCU_COUNT:-400} \
    ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 1 --requests 1 --warmup 1 \
    --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  python3 bench/ncu_summary.py "$OUT/ncu_w1.log" > "$OUT/ncu_summary.txt" 2>&1
fi

if [[ " $STEPS " == *" ncu_llm "* ]]; then
  # a 6 GiB engine (ncu saves and restores the device memory the process holds around each of a
  # kernel's replay passes: with the default 0.9 of an H200 one kernel ran past 130 s), and ncu
  # ends the program once it has its launches (--kill on): ~10 s in all
  run ncu_llm timeout ${NCUL_TIMEOUT:-240} ncu --kill on \
    --kernel-name "regex:gemv_tc_kernel|paged_decode_kernel" \
    --launch-skip ${NCUL_SKIP:-400} --launch-count ${NCUL_COUNT:-10} --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section MemoryWorkloadAnalysis ./$B/bench/bench_w1 -m "$FULL" --device 0 --memory-gb 6 \
    --concurrency 1 --requests 2 --warmup 0 "${W1_ARGS[@]}"
  grep -E "gemv_tc_kernel|paged_decode_kernel|Duration|Warp Cycles Per Issued|Achieved Occupancy" \
    "$OUT/ncu_llm.log" | sed 's/^ */ncu_llm: /' | cut -c1-120 | tee -a "$SUMMARY"
fi
if [[ " $STEPS " == *" ncu_k "* ]]; then
  # why a kernel is slow under load: ncu's speed-of-light, occupancy, warp-state and scheduler
  # sections for NCUK_COUNT (4) launches of the kernels matching NCUK_REGEX (the vocoder conv and
  # the flow's paged attention) inside W1 at C = 16, after NCUK_SKIP (300) matching launches.
  # Log: ncu_k.log. A 24 GiB engine and --kill on, as in ncu_llm (the replay passes save and
  # restore the memory the process holds)
  # NCUK_SOURCE=1 adds the source counters (warp stalls per SASS instruction) to a report
  # (ncu_k.ncu-rep) and prints its SASS page as CSV (ncu_k_sass.csv), as the ncu_llm findings were
  # made (docs/kernels.md, "The LLM decode step against its floor")
  src=(); [ "${NCUK_SOURCE:-0}" = 1 ] && src=(--section SourceCounters --import-source no -o "$OUT/ncu_k")
  run ncu_k timeout 300 ncu --kill on --kernel-name "regex:${NCUK_REGEX:-conv2_kernel|attn_dit_paged}" \
    --launch-skip ${NCUK_SKIP:-300} --launch-count ${NCUK_COUNT:-4} --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis "${src[@]}" ./$B/bench/bench_w1 \
    -m "$FULL" --device 0 --memory-gb 24 ${NCUK_W1:---concurrency 16 --warmup 1} "${W1_ARGS[@]}"
  if [ -f "$OUT/ncu_k.ncu-rep" ]; then
    run ncu_k_details timeout 60 ncu --import "$OUT/ncu_k.ncu-rep" --page details --print-details all
    ncu --import "$OUT/ncu_k.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_k_sass.csv" 2>&1
  fi
fi

if [[ " $STEPS " == *" ncu_voc "* ]]; then
  # the launches as the bench's "voc b16" scenario makes them (BENCH_FILTER: the op's size column)
  for spec in "rb2_k3|16x 64>64 k3 d1 L11161 f16 staged|conv3_kernel" \
              "rb2_k7|16x 64>64 k7 d1 L11161 f16 auto|conv2_kernel" \
              "rb1_k3|16x 128>128 k3 d1 L3720 f16 staged|conv3_kernel"; do
    IFS='|' read -r name filt kre <<< "$spec"
    BENCH_FILTER="$filt" run ncu_voc_$name timeout 150 ncu --kernel-name-base demangled \
      --kernel-name "regex:$kre" --launch-skip 5 --launch-count 1 --set full \
      --import-source no -o "$OUT/ncu_voc_$name" ./$B/tests/test_kernels --bench hift
    if [ -f "$OUT/ncu_voc_$name.ncu-rep" ]; then
      ncu --import "$OUT/ncu_voc_$name.ncu-rep" --page details --print-details all \
        >> "$OUT/ncu_voc_$name.log" 2>&1
      ncu --import "$OUT/ncu_voc_$name.ncu-rep" --page source --print-source sass --csv \
        > "$OUT/ncu_voc_${name}_sass.csv" 2>&1
    fi
    grep -E "Duration|Issue Slots Busy|Achieved Occupancy|excessive" "$OUT/ncu_voc_$name.log" \
      | sed "s/^ */ncu_voc $name: /" | cut -c1-120 | tee -a "$SUMMARY"
  done
fi

if [[ " $STEPS " == *" cudnn "* ]] && [ -d .dev/official ]; then
  # the vocoder's convolutions through cuDNN (PyTorch), to compare with test_gpu_hift's timings
  run hift_cudnn timeout 300 python3 bench/official/hift_cudnn.py --model "$FULL" \
    --out "$OUT/hift_cudnn.json"
fi

if [[ " $STEPS " == *" official "* ]] && [ -d .dev/official ]; then
  run official timeout 300 python3 bench/official/run_official.py --model "$FULL" --shared "$SHARED" \
    --device cuda --out "$OUT/official.json" ${OFFICIAL_ARGS:-}
fi

# ---- steps that replaced the one-off session scripts (bench/HISTORY.md, "Session scripts") ----
if [[ " $STEPS " == *" sweep "* ]]; then
  # sweep: the reference W1 / W2 numbers of bench/RESULTS.md, as the final call of every session
  # measured them: W1 at C = 1 (16 requests), then SWEEP_LEVELS (4,16,32,48,64,128,256; 2C
  # requests a level) on one engine, W2 (--offline SWEEP_W2: 256 requests of 250 tokens), then
  # C = 64 alone on SWEEP_FRESH (3) fresh engines (the burst meets every batch shape for the first
  # time: the harder case). SWEEP_ARGS: more bench_w1 arguments for every run. About 2 minutes on
  # an H100 after the build. Logs: sweep_c1.log, sweep_scale.log, sweep_w2.log,
  # sweep_c64_fresh<k>.log. Summary: a line per level ("sweep C=64: TTFB p50 ... p95 ..., RTF p50,
  # xRT, underruns, GPU util"), the W2 line, the fresh runs, and "sweep: highest C with TTFB p95
  # <= 300 ms and no underrun: N" (the W1 targets: docs/scheduler.md section 6, bench/RESULTS.md)
  sweep_rows() { # LOG TAG: a summary line per W1 level of LOG, and its W2 row
    awk -v tag="$2" '
      function flush() { if (row != "") print tag row (gpu != "" ? ", GPU util " gpu : ""); row = ""; gpu = "" }
      /^ +[0-9]+ +[0-9]+ +[0-9.]+ms/ { flush()
        row = sprintf(" C=%s: TTFB p50 %s p95 %s, RTF p50 %s, xRT %s, underruns %s", $1, $3, $4, $5, $7, $8); next }
      /^ +reqs +wall_s/ { flush(); if ((getline) > 0)
        row = sprintf(" W2 %s requests: RTF %s, xRT %s, TTFB p50 %s p95 %s, wall %s s", $1, $4, $5, $6, $7, $2); next }
      /gpu util: mean/ && row != "" { gpu = $4; sub(/,$/, "", gpu) }
      END { flush() }' "$1"
  }
  # shellcheck disable=SC2086
  run sweep_c1 ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 1 --requests 16 \
    ${SWEEP_ARGS:-} "${W1_ARGS[@]}"
  # shellcheck disable=SC2086
  run sweep_scale ./$B/bench/bench_w1 -m "$FULL" --device 0 \
    --concurrency "${SWEEP_LEVELS:-4,16,32,48,64,128,256}" ${SWEEP_ARGS:-} "${W1_ARGS[@]}"
  # shellcheck disable=SC2086
  run sweep_w2 ./$B/bench/bench_w1 -m "$FULL" --device 0 --offline "${SWEEP_W2:-256}" \
    ${SWEEP_ARGS:-} "${W1_ARGS[@]}"
  for k in $(seq 1 "${SWEEP_FRESH:-3}"); do
    # shellcheck disable=SC2086
    run sweep_c64_fresh$k ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 64 \
      ${SWEEP_ARGS:-} "${W1_ARGS[@]}"
  done
  for f in c1 scale w2; do sweep_rows "$OUT/sweep_$f.log" sweep | tee -a "$SUMMARY"; done
  for k in $(seq 1 "${SWEEP_FRESH:-3}"); do
    sweep_rows "$OUT/sweep_c64_fresh$k.log" "sweep fresh $k" | tee -a "$SUMMARY"
  done
  note "sweep: highest C with TTFB p95 <= 300 ms and no underrun: $(awk '
    /^ +[0-9]+ +[0-9]+ +[0-9.]+ms/ { p = $4; sub(/ms$/, "", p)
      if (p + 0 <= 300 && $8 == 0 && $1 + 0 > best) best = $1 + 0 }
    END { print (best ? best : "none") }' "$OUT/sweep_c1.log" "$OUT/sweep_scale.log")"
fi
# ---- end of the steps that replaced the session scripts ----

echo "==================== summary ===================="
cat "$SUMMARY"
for f in "$OUT"/test_*.log; do
  [ -f "$f" ] || continue
  echo "--- $(basename "$f"): $(grep -cE 'FAIL' "$f") FAIL lines"
  grep -E 'FAIL|rel|max abs|ms' "$f" | grep -vE '^\[ *(RUN|OK) ' | tail -8
done
for f in "$OUT"/san_*.log; do
  [ -f "$f" ] || continue
  grep -qE '^========= (Invalid|Race|Uninitialized|Barrier|Program hit|Error)' "$f" || continue
  echo "--- $(basename "$f"): first reports"
  grep -m 6 -A 3 -E '^========= (Invalid|Race|Uninitialized|Barrier|Program hit|Error)' "$f" | cut -c1-200
done
[ -f "$OUT/ncu_summary.txt" ] && { echo "--- ncu_summary.txt"; head -30 "$OUT/ncu_summary.txt"; }
[ -f "$OUT/hift_cudnn.log" ] && { echo "--- hift_cudnn.log"; grep -E "cuDNN|Error" "$OUT/hift_cudnn.log"; grep -h "TIMING gpu_hift_infer" "$OUT"/test_gpu_hift.log 2>/dev/null; }
for f in "$OUT"/bench_*.log "$OUT"/official.log; do [ -f "$f" ] && { echo "--- $(basename "$f")"; tail -14 "$f"; }; done
for f in "$OUT"/multi_*test*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f"): $(grep -cE 'FAIL' "$f") FAIL lines"
done
for f in "$OUT"/prof_*_test_*.log "$OUT"/mem_test_*.log; do
  [ -f "$f" ] || continue
  echo "--- $(basename "$f"): $(grep -cE 'FAIL' "$f") FAIL lines, $(grep -cE 'cudaErrorInvalidValue|invalid argument' "$f") invalid-argument lines"
  grep -E 'FAIL|profile|taps per slab|budget|engine [0-9] of 2|stated need|needs' "$f" | head -12
done
# W1 rows (the line after the table header) of each profile, h100 first
for c in c1 c16; do
  for f in "$OUT"/prof_*_w1_$c.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f" .log): $(grep -A1 -E '^ +C +' "$f" | tail -1) $(grep -E 'requests failed' "$f")"
  done
done
for f in "$OUT"/mem_*g_w1_c16.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E 'gpu_memory_fraction' "$f") / $(grep -A1 -E '^ +C +' "$f" | tail -1) / $(grep -E 'engine holds|requests failed' "$f" | head -2)"
done
for f in "$OUT"/mem_need_ma*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -oE 'the engine needs [^;]*' "$f" | head -1)"
done
# W3's table last (the w3 step)
if [ -f "$OUT/w3.log" ]; then
  echo "--- w3.log: $(grep -E '^W3 live users' "$OUT/w3.log" | cut -c1-200)"
  grep -E 'requests failed|^bench_w1: max_active' "$OUT/w3.log"
  sed -n '/^W3 summary/,$p' "$OUT/w3.log"
fi
# the device tool returns at most 8 files: everything but the summary goes into one archive
if [ -n "${PACK_LOGS-1}" ]; then
  (cd "$OUT" && ls -A | grep -v -e '^summary.txt$' -e '^logs.tgz$' > /tmp/cosy_packlist.$$ &&
   tar czf logs.tgz -T /tmp/cosy_packlist.$$ && xargs rm -rf < /tmp/cosy_packlist.$$; rm -f /tmp/cosy_packlist.$$)
fi
