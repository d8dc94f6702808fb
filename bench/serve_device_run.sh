#!/usr/bin/env bash
# W1 through the serving layers on a GPU machine without network, beside bench_w1 of the same
# build: in process (bench_w1), through the HTTP server (cosyvoice.server) and through Triton's
# gRPC streaming (serving/triton), at C = 1 and C = 64; then, when two GPUs are visible (multi),
# the HTTP server as one process per GPU (GPU 0 alone at C = 64, GPUs 0 and 1 at C = 128, the
# clients spread over the two: bench/serve_multi_w1.py) and Triton on two GPUs against one at
# C = 128. Logs go to $OUT (or build/dev/out/serve); a table is printed last.
#
#   bash bench/serve_device_run.sh MODEL.gguf [http] [triton] [multi] [standin] [cancel] [ws]
#   (default: http triton multi; standin: bench/serve_overhead.py, the serving path alone on a
#   stand-in engine, no GPU; cancel: bench/serve_cancel.py, how soon the engine lets go of a
#   request whose client left, before its first audio and mid-stream; ws: workload W4, text
#   streamed in by simulated LLMs at 20-40 words/s (docs/scheduler.md section 6), in process
#   (bench_w1 --text-stream) and through the server's WebSocket (bench/serve_ws.py run) at
#   C = 64, the WebSocket audio checked against the in-process audio, then barge-in
#   (bench/serve_ws.py cancel: cancel -> last audio frame, engine state freed); a table last)
#
# What it expects besides what bench/device_run.sh expects (its build step has run: build/dev):
#   .dev/wheels/   wheels of the device's Python for the servers and clients, installed with
#                  --no-index --no-deps into .dev/servenv (a venv over the system site-packages,
#                  so the device's numpy is used). Make them here for the device's Python X.Y:
#     pip download --only-binary=:all: --no-deps --python-version X.Y --platform manylinux2014_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux_2_35_x86_64 -d .dev/wheels \
#       fastapi starlette pydantic pydantic-core typing-extensions typing-inspection \
#       annotated-types anyio sniffio idna uvicorn h11 httptools uvloop click httpx httpcore \
#       certifi tritonclient grpcio protobuf python-rapidjson packaging nvidia-pytriton websockets
#   (websockets, pure Python: uvicorn's WebSocket protocol and bench/serve_ws.py's client; without
#   it the ws step stops with a message)
#   (httptools and uvloop: uvicorn takes them when installed; on the stand-in engine they cut
#   the server's TTFB overhead at C = 64 by about 10 ms, bench/RESULTS.md)
#   (nvidia-pytriton alone is about 55 MB: with a 64 MiB carry, put it in .dev/wheels_pt and
#   send it in a call of its own after the others are installed: the venv stays on the warm
#   machine. Recent fastapi needs opentelemetry-api: download with dependencies, e.g.
#   pip download --only-binary=:all: --python-version X.Y --platform ... -d .dev/wheels \
#     fastapi uvicorn httptools uvloop httpx 'tritonclient[grpc]' python-rapidjson   (then drop
#   numpy's wheel))
# The voice is bench_w1's own (bench/serve_w1.py make-voice), so all three rows say the same.
# SERVE_VENV=DIR: run the servers and clients in that virtual environment with the cosyvoice
# package installed there (bench/wheel_device_run.sh: the wheel), instead of this checkout's
# package and build/dev's library; SERVE_DIR (default serve) names the log folder under $OUT,
# SERVE_LEVELS (default 1,64) the HTTP server's concurrency levels. SERVE_PY=PYTHON: run the
# servers and clients with that Python (which has their packages) and this checkout's package and
# library, making no venv (a CPU check: SERVE_PY=build/venv/bin/python NO_INPROC=1 WS_DEVICE=-1
# WS_C=2 WS_LEVEL_S=4 WS_SKIP=1 WS_ROUNDS=2 bash bench/serve_device_run.sh build/test/small-f32.gguf ws).
# The ws step's knobs: WS_C (64: sessions, engine max_active), WS_DEVICE (0), WS_LEVEL_S (40: the
# level's seconds), WS_SKIP (10: not counted), WS_ROUNDS (3: barge-in rounds of WS_C cancels),
# WS_CANCEL_ARGS (serve_ws.py cancel's utterances and timing: --ts-lines 6 --cancel-max 0.3).
set -u
cd "$(dirname "$0")/.."
export LC_ALL=C PYTHONUNBUFFERED=1
MODEL=${1:?usage: serve_device_run.sh MODEL.gguf [http] [triton] [multi] [standin]}
shift
STEPS=${*:-http triton multi}
OUT=${OUT:-build/dev/out}/${SERVE_DIR:-serve}
mkdir -p "$OUT"
SHARED=$PWD/.dev/shared
[ -d "$SHARED/bench" ] || SHARED=$(cd .. && pwd)/shared
TEXTS=$SHARED/bench/w1_texts.txt
WAV=$SHARED/audio/zero_shot_prompt.wav
LIB=$PWD/build/dev/lib/libcosyvoice.so.0
[ -f "$LIB" ] || LIB=$PWD/build/lib/libcosyvoice.so.0
if [ -n "${SERVE_VENV:-}" ]; then unset COSYVOICE_LIB PYTHONPATH; else
  export COSYVOICE_LIB=$LIB PYTHONPATH=$PWD/python; fi
# libsamplerate from the unpacked Debian packages (bench/device_run.sh: .dev/root)
[ -d "$PWD/.dev/root/usr/lib/x86_64-linux-gnu" ] && \
  export LD_LIBRARY_PATH=$PWD/.dev/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
VENV=${SERVE_VENV:-$PWD/.dev/servenv}
if [ -n "${SERVE_PY:-}" ]; then :; elif [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
  # numpy may live outside the system site-packages (a user or PYTHONPATH directory, which a
  # venv does not see): point the venv at wherever python3 finds it
  NPDIR=$(python3 -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))' 2>/dev/null)
  SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ -n "$NPDIR" ] && echo "$NPDIR" > "$SP/cosy_system_numpy.pth"
fi
# the cosyvoice package from this checkout, also for Triton's Python backend stub (which does not
# inherit PYTHONPATH)
if [ -z "${SERVE_PY:-}" ]; then
  SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ -n "${SERVE_VENV:-}" ] || echo "$PWD/python" > "$SP/cosy_package.pth"
  # wheels_np: numpy 1.26 (pytriton's Python backend needs numpy < 2, as
  # tools/python-test-requirements.txt pins it: with the device's numpy 2 its BYTES inputs arrived
  # unreadable, "unpack_from requires a buffer of ..."; the venv's own numpy comes before the
  # system one); wheels_tc: tritonclient + grpc; wheels_pt: nvidia-pytriton alone (see above)
  for d in .dev/wheels_np .dev/wheels .dev/wheels_tc .dev/wheels_pt; do
    if [ -d $d ] && ls $d/*.whl >/dev/null 2>&1; then
      "$VENV/bin/python" -m pip install -q --no-index --no-deps $d/*.whl
    fi
  done
fi
PY=${SERVE_PY:-$VENV/bin/python}
VOICES=$OUT/voices
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
BW=build/dev/bench/bench_w1
[ -x "$BW" ] || BW=build/bench/bench_w1
W1="--texts $TEXTS --warmup 2"
"$PY" bench/serve_w1.py make-voice -m "$MODEL" --prompt-wav "$WAV" -o "$VOICES/w1.gguf" || exit 1

wait_port() { # host:port, seconds[, pid: give up as soon as that process has exited]
  "$PY" - "$1" "$2" "${3:-0}" <<'EOF'
import os, socket, sys, time
host, port = sys.argv[1].split(":"); t0 = time.time(); pid = int(sys.argv[3])
def alive():
    if not pid: return True
    try:
        os.kill(pid, 0); return True
    except OSError:
        return False
while time.time() - t0 < float(sys.argv[2]) and alive():
    try:
        socket.create_connection((host, int(port)), 1).close(); sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
EOF
}

if [ -z "${NO_INPROC:-}" ]; then # NO_INPROC=1: a later call of the same build skips it
  echo "== in process: bench_w1 (same build)" | tee -a "$SUMMARY"
  "$BW" -m "$MODEL" --device 0 --concurrency 1,64 --prompt-wav "$WAV" $W1 > "$OUT/bench_w1.log" 2>&1
  grep -E "^ +(C|[0-9]+) " "$OUT/bench_w1.log" | tee -a "$SUMMARY"
fi

if [[ " $STEPS " == *" http "* ]]; then
  # the engine as bench_w1 makes it (max_active = the largest level, 64), so the rows differ by
  # the serving path only; the client: serve_w1.py's default (one asyncio loop, raw HTTP/1.1)
  "$PY" -c 'import httptools, uvloop' 2>/dev/null && HTTP_STACK="httptools + uvloop" \
    || HTTP_STACK="h11 + asyncio (no httptools/uvloop wheels)"
  echo "== HTTP server (cosyvoice.server, $HTTP_STACK), device 0" | tee -a "$SUMMARY"
  "$PY" -m cosyvoice.server --model "$MODEL" --voices "$VOICES" --device 0 --max-active 64 \
    --host 127.0.0.1 --port 18000 --log-level warning > "$OUT/http_server.log" 2>&1 &
  SRV=$!
  if wait_port 127.0.0.1:18000 300 $SRV; then
    "$PY" bench/serve_w1.py http --url http://127.0.0.1:18000 --concurrency ${SERVE_LEVELS:-1,64} $W1 \
      > "$OUT/http.log" 2>&1
    grep -E "^ +(C|[0-9]+) |failed" "$OUT/http.log" | tee -a "$SUMMARY"
    echo "-- the same server, serve_w1.py --client threads (C threads with httpx each)" | tee -a "$SUMMARY"
    "$PY" bench/serve_w1.py http --client threads --url http://127.0.0.1:18000 --concurrency ${SERVE_LEVELS:-1,64} \
      $W1 > "$OUT/http_threads.log" 2>&1
    grep -E "^ +[0-9]+ |failed" "$OUT/http_threads.log" | tee -a "$SUMMARY"
  else echo "http server did not start (see http_server.log)" | tee -a "$SUMMARY"; fi
  kill "$SRV"; wait "$SRV" 2>/dev/null
fi

if [[ " $STEPS " == *" cancel "* ]]; then # not in the default steps: bash bench/serve_device_run.sh MODEL cancel
  # a client that leaves before its first audio frees its engine slot within 1 s (docs/serving.md);
  # bench/serve_cancel.py closes raw sockets before the first audio and mid-stream, alone and
  # beside 16 long streams, and times the engine's counts (/health) back to where they were
  echo "== clients that leave (bench/serve_cancel.py), HTTP server on device 0" | tee -a "$SUMMARY"
  "$PY" -m cosyvoice.server --model "$MODEL" --voices "$VOICES" --device 0 --max-active 64 \
    --host 127.0.0.1 --port 18003 --log-level warning > "$OUT/cancel_server.log" 2>&1 &
  SRV=$!
  if wait_port 127.0.0.1:18003 300 $SRV; then
    for load in 0 16; do
      "$PY" bench/serve_cancel.py --url http://127.0.0.1:18003 --voice w1 --trials 10 \
        --load $load > "$OUT/cancel_load$load.log" 2>&1
      grep -E "serve_cancel|p50|Error" "$OUT/cancel_load$load.log" | tee -a "$SUMMARY"
    done
  else echo "http server did not start (see cancel_server.log)" | tee -a "$SUMMARY"; fi
  kill "$SRV"; wait "$SRV" 2>/dev/null
fi

if [[ " $STEPS " == *" ws "* ]]; then # not in the default steps: bash bench/serve_device_run.sh MODEL ws
  # W4 (bench_w1 --text-stream, docs/scheduler.md section 6) in process and through the
  # WebSocket with the same sessions (texts, words, times, seeds, bounds) and the same voice file
  # (the server's w1), so that the rows compare and the audio can be checked byte for byte
  C=${WS_C:-64}
  TS="--text-stream 20,40 --level-s ${WS_LEVEL_S:-40} --skip ${WS_SKIP:-10} --seed 1 --texts $TEXTS"
  DUMP=$(mktemp -d "${TMPDIR:-/tmp}/cosy-ws-XXXXXX")
  echo "== W4 text stream in process (bench_w1 --text-stream 20,40), C = $C" | tee -a "$SUMMARY"
  "$BW" -m "$MODEL" --device "${WS_DEVICE:-0}" --voice "$VOICES/w1.gguf" --prompt-wav "$WAV" --concurrency "$C" \
    --warmup 2 $TS --ts-dump "$DUMP" > "$OUT/ws_inproc.log" 2>&1 \
    || echo "bench_w1 --text-stream exited $? (see ws_inproc.log)" | tee -a "$SUMMARY"
  grep -E "^ +(C|[0-9]+) |failed" "$OUT/ws_inproc.log" | tee -a "$SUMMARY"
  if ! "$PY" -c 'import websockets' 2>/dev/null; then
    echo "SKIP ws: no websockets package for $PY (put its wheel in .dev/wheels)" | tee -a "$SUMMARY"
  else
    echo "== W4 through the WebSocket (bench/serve_ws.py run), C = $C" | tee -a "$SUMMARY"
    "$PY" -m cosyvoice.server --model "$MODEL" --voices "$VOICES" --device "${WS_DEVICE:-0}" \
      --max-active "$C" --host 127.0.0.1 --port 18004 --log-level warning > "$OUT/ws_server.log" 2>&1 &
    SRV=$!
    if wait_port 127.0.0.1:18004 300 $SRV; then
      "$PY" bench/serve_ws.py run --url http://127.0.0.1:18004 --voice w1 --concurrency "$C" $TS \
        --compare "$DUMP" > "$OUT/ws_run.log" 2>&1
      grep -E "^ +(C|[0-9]+) |failed|audio check|Error" "$OUT/ws_run.log" | tee -a "$SUMMARY"
      # barge-in: utterances of 6 lines (~80 words, several seconds of audio: W4's 2-line ones had
      # mostly been sent whole before a cancel 0-0.5 s after their first audio), cancelled 0-0.3 s
      # after their first audio (WS_CANCEL_ARGS)
      echo "== barge-in through the WebSocket (bench/serve_ws.py cancel), $C sessions" | tee -a "$SUMMARY"
      "$PY" bench/serve_ws.py cancel --url http://127.0.0.1:18004 --voice w1 --concurrency "$C" \
        --rounds "${WS_ROUNDS:-3}" --text-stream 20,40 --texts "$TEXTS" \
        ${WS_CANCEL_ARGS:---ts-lines 6 --cancel-max 0.3} > "$OUT/ws_cancel.log" 2>&1
      grep -E "^ws cancel|Error" "$OUT/ws_cancel.log" | tee -a "$SUMMARY"
    else echo "ws server did not start (see ws_server.log)" | tee -a "$SUMMARY"; fi
    kill "$SRV"; wait "$SRV" 2>/dev/null
    # the table: first audio p50/p95 and underruns of both rows (columns: C utts fail fa_p50
    # fa_p95 fa_p99 underrun late_max xRT words audio_s text_s), cancel p95, the audio check
    echo "== W4 at C = $C: in process vs WebSocket" | tee -a "$SUMMARY"
    awk -v C="$C" 'FNR == 1 { f++ } $1 == C && NF == 12 { p50[f] = $4; p95[f] = $5; u[f] = $7; n[f] = $2; x[f] = $9 }
      /^ws cancel: cancel -> last audio frame/ { cp95 = $12 " ms" }
      /^ws cancel: one chunk/ { ch = $10 " ms; p95 <= one chunk: " $NF }
      /^ws cancel: engine state freed/ { fr = $9 }
      /^ws audio check:/ { eq = $4; sub(/:$/, "", eq) }
      END {
        printf "%-12s %9s %9s %9s %6s %7s\n", "", "fa_p50", "fa_p95", "underrun", "utts", "xRT"
        printf "%-12s %9s %9s %9s %6s %7s\n", "in process", p50[1], p95[1], u[1], n[1], x[1]
        printf "%-12s %9s %9s %9s %6s %7s\n", "WebSocket", p50[2], p95[2], u[2], n[2], x[2]
        a = p95[1]; b = p95[2]; sub(/ms$/, "", a); sub(/ms$/, "", b)
        if (a != "" && b != "") printf "ws first audio p95 - in process: %+.1f ms (the target: <= 30 ms)\n", b - a
        printf "ws cancel -> last audio frame p95: %s (one chunk %s); engine state freed every round: %s\n", cp95, ch, fr
        printf "ws audio equals in process: %s\n", eq }' \
      "$OUT/ws_inproc.log" "$OUT/ws_run.log" "$OUT/ws_cancel.log" | tee -a "$SUMMARY"
  fi
  rm -rf "$DUMP"
fi

if [[ " $STEPS " == *" standin "* ]]; then # not in the default steps: no GPU, seconds
  echo "== the serving path on a stand-in engine (bench/serve_overhead.py, this machine's CPUs)" \
    | tee -a "$SUMMARY"
  "$PY" bench/serve_overhead.py --concurrency 1,64 > "$OUT/standin.log" 2>&1
  sed -n '/== overhead/,$p' "$OUT/standin.log" | tee -a "$SUMMARY"
fi

triton_run() { # name, CUDA_VISIBLE_DEVICES, concurrency
  local name=$1 gpus=$2 conc=$3 work=$OUT/triton-$1
  mkdir -p "$work"
  CUDA_VISIBLE_DEVICES=$gpus COSYVOICE_MODEL=$(realpath "$MODEL") COSYVOICE_VOICES=$(realpath "$VOICES") \
    "$PY" serving/triton/launch.py --kind gpu --address 127.0.0.1 --http-port 18100 \
    --grpc-port 18101 --metrics-port 18102 --workdir "$work" > "$OUT/triton_$name.server.log" 2>&1 &
  local SRV=$!
  if wait_port 127.0.0.1:18101 300 $SRV && sleep 20; then
    "$PY" bench/serve_w1.py triton --url 127.0.0.1:18101 --concurrency "$conc" $W1 \
      > "$OUT/triton_$name.log" 2>&1
    grep -E "^ +(C|[0-9]+) |failed" "$OUT/triton_$name.log" | tee -a "$SUMMARY"
  else echo "triton did not start (see triton_$name.server.log)" | tee -a "$SUMMARY"; fi
  kill "$SRV"; wait "$SRV" 2>/dev/null
}

if [[ " $STEPS " == *" triton "* ]]; then
  echo "== Triton gRPC streaming (serving/triton), GPU 0" | tee -a "$SUMMARY"
  triton_run one 0 1,64
fi
if [[ " $STEPS " == *" multi "* ]]; then
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$n" -ge 2 ]; then
    # HTTP: one server process per GPU (docs/serving.md), started together
    echo "== HTTP, one server process per GPU: GPU 0 at C = 64, then GPUs 0 and 1 at C = 128" \
      "(client k on server k % 2)" | tee -a "$SUMMARY"
    SRVS=()
    for g in 0 1; do
      CUDA_VISIBLE_DEVICES=$g "$PY" -m cosyvoice.server --model "$MODEL" --voices "$VOICES" \
        --device 0 --max-active 256 --host 127.0.0.1 --port $((18010 + g)) --log-level warning \
        > "$OUT/http_gpu$g.server.log" 2>&1 &
      SRVS+=($!)
    done
    if wait_port 127.0.0.1:18010 300 "${SRVS[0]}" && wait_port 127.0.0.1:18011 300 "${SRVS[1]}"; then
      "$PY" bench/serve_multi_w1.py http --url http://127.0.0.1:18010 --concurrency 64 $W1 \
        > "$OUT/http_c64_1gpu.log" 2>&1
      grep -E "^ +[0-9]+ |failed" "$OUT/http_c64_1gpu.log" | sed 's/^/1 GPU  /' | tee -a "$SUMMARY"
      "$PY" bench/serve_multi_w1.py http --url http://127.0.0.1:18010,http://127.0.0.1:18011 \
        --concurrency 128 $W1 > "$OUT/http_c128_2gpu.log" 2>&1
      grep -E "^ +[0-9]+ |failed" "$OUT/http_c128_2gpu.log" | sed 's/^/2 GPUs /' | tee -a "$SUMMARY"
      awk 'FNR == 1 { f++ } $1 ~ /^[0-9]+$/ && $4 ~ /ms$/ { x[f] = $7; t[f] = $4 }
        END { if (x[1] > 0 && x[2] != "") printf "http multi: xRT 2 GPUs C=128 / 1 GPU C=64 = %.2fx; TTFB p95 %s vs %s\n", x[2] / x[1], t[2], t[1] }' \
        "$OUT/http_c64_1gpu.log" "$OUT/http_c128_2gpu.log" | tee -a "$SUMMARY"
    else echo "http servers did not start (see http_gpu*.server.log)" | tee -a "$SUMMARY"; fi
    kill "${SRVS[@]}"; wait "${SRVS[@]}" 2>/dev/null
    echo "== Triton, C = 128: one GPU, then two (one instance, one engine, per GPU)" | tee -a "$SUMMARY"
    triton_run c128-1gpu 0 128
    triton_run c128-2gpu 0,1 128
  else echo "SKIP multi: $n GPU(s) visible" | tee -a "$SUMMARY"; fi
fi
echo "== summary ($OUT/summary.txt)"
cat "$SUMMARY"
