#!/usr/bin/env bash
# One call on a lent GPU machine: build, parity against the CPU reference and the golden data,
# benchmarks. Logs go to $OUT (or build/dev/out); a short table is printed last.
#
#   bash bench/device_run.sh [steps]     steps: any of build kernels stages engine bench profile
#                                        cudnn official stress (default: all but profile, cudnn
#                                        and stress)
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
STEPS=${*:-build kernels stages engine bench official}
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
SHARED=$PWD/.dev/shared
[ -d "$SHARED/golden" ] || SHARED=$(cd .. && pwd)/shared
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

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
note "device: $(sed -n 2p "$OUT/gpu.txt")  commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

TESTS="$B/tests/test_kernels $B/tests/test_gpu_llm $B/tests/test_gpu_flow $B/tests/test_gpu_hift $B/tests/test_gpu_engine $B/tests/test_api $B/tests/test_stress"
BENCHES="$B/bench/bench_kernels $B/bench/bench_w1"
SMALL=$B/test/small-f32.gguf
FULL=$B/full-bf16.gguf

if [[ " $STEPS " == *" build "* ]]; then
  run build make -j"${JOBS:-$(nproc)}" B=$B SHARED_DIR="$SHARED" CUDA=1 CUDA_ARCHS="$ARCH" lib $TESTS \
    $BENCHES $SMALL
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
  COSY_STRESS_ONLY=gpu COSY_STRESS_MODEL=$PWD/$FULL COSY_STRESS_EXACT=${COSY_STRESS_EXACT:-1} \
    run test_stress_gpu_full ./$B/tests/test_stress
fi
if [[ " $STEPS " == *" bench "* ]]; then
  run bench_kernels ./$B/bench/bench_kernels
  run bench_w1_c1 ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency 1 --requests 16 \
    --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  # the scheduler under load: W1 at higher concurrency (2*C requests per level) and W2 (offline,
  # W2_N requests of 250 tokens at once); each level also prints batch sizes and GPU util.
  # W1_LEVELS= or W2_N=0 skips one.
  if [ -n "${W1_LEVELS-16,64,128,256}" ]; then
    run bench_w1_scale ./$B/bench/bench_w1 -m "$FULL" --device 0 --concurrency "${W1_LEVELS-16,64,128,256}" \
      --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
  fi
  if [ "${W2_N:-256}" -gt 0 ]; then
    run bench_w2 ./$B/bench/bench_w1 -m "$FULL" --device 0 --offline "${W2_N:-256}" \
      --texts "$SHARED/bench/w1_texts.txt" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav"
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

if [[ " $STEPS " == *" cudnn "* ]] && [ -d .dev/official ]; then
  # the vocoder's convolutions through cuDNN (PyTorch), to compare with test_gpu_hift's timings
  run hift_cudnn timeout 300 python3 bench/official/hift_cudnn.py --model "$FULL" \
    --out "$OUT/hift_cudnn.json"
fi

if [[ " $STEPS " == *" official "* ]] && [ -d .dev/official ]; then
  run official timeout 300 python3 bench/official/run_official.py --model "$FULL" --shared "$SHARED" \
    --device cuda --out "$OUT/official.json" ${OFFICIAL_ARGS:-}
fi

echo "==================== summary ===================="
cat "$SUMMARY"
for f in "$OUT"/test_*.log; do
  [ -f "$f" ] || continue
  echo "--- $(basename "$f"): $(grep -cE 'FAIL' "$f") FAIL lines"
  grep -E 'FAIL|rel|max abs|ms' "$f" | grep -vE '^\[ *(RUN|OK) ' | tail -8
done
[ -f "$OUT/ncu_summary.txt" ] && { echo "--- ncu_summary.txt"; head -30 "$OUT/ncu_summary.txt"; }
[ -f "$OUT/hift_cudnn.log" ] && { echo "--- hift_cudnn.log"; grep -E "cuDNN|Error" "$OUT/hift_cudnn.log"; grep -h "TIMING gpu_hift_infer" "$OUT"/test_gpu_hift.log 2>/dev/null; }
for f in "$OUT"/bench_*.log "$OUT"/official.log; do [ -f "$f" ] && { echo "--- $(basename "$f")"; tail -14 "$f"; }; done
