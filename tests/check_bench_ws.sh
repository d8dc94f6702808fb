#!/usr/bin/env bash
# check_bench_ws.sh - workload W4 (text streamed in by simulated LLMs, docs/scheduler.md section
# 6) on the CPU with the small model and tiny numbers: in process (bench_w1 --text-stream) with 2
# sessions for 2 s (every utterance counted), then the same sessions through the speech server's WebSocket
# (bench/serve_ws.py run) with the WebSocket audio checked byte for byte against the in-process
# audio (both use one voice file, made by bench/serve_w1.py make-voice), then one barge-in round
# (bench/serve_ws.py cancel). It must work, not be fast: exit 0, rows with counted utterances and
# no failure, a first-audio figure, "ws audio check: PASS", cancels answered and the engine's
# counts back after them; bad W4 options exit 2 naming the option. The WebSocket part needs a
# Python with fastapi, uvicorn, websockets and numpy (SERVER_PY; `make test-bench` passes the
# venv of `make test-python`) and is skipped, saying so, without one. Run by `make test-bench`;
# about 30 s. SKIP without the test model (make converts it from the small reference checkpoint
# under SHARED_DIR: docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/bench_inputs.sh
bench_inputs check_bench_ws
fail=0
bad() { echo "FAIL: check_bench_ws: $*"; fail=1; }
# the row of C = 2 in a log (columns: C utts fail fa_p50 fa_p95 fa_p99 underrun late_max xRT words
# audio_s text_s): at least one utterance counted, none failed, a first audio, an xRT
check_row() { # log, what
  local row
  row=$(awk '$1 == "2" && NF == 12' "$1")
  [ "$(echo "$row" | grep -c .)" = 1 ] || { bad "$2: not one row of C = 2"; return; }
  read -r _ utts nfail p50 p95 _ _ _ xrt words _ _ <<< "$row" || true
  [ "${utts:-0}" -ge 1 ] 2>/dev/null || bad "$2: no counted utterance ($row)"
  [ "${nfail:-1}" = 0 ] || bad "$2: failed utterances ($row)"
  awk -v a="${p50%ms}" -v b="${p95%ms}" 'BEGIN { exit !(a > 0 && a <= b) }' || bad "$2: no first audio ($row)"
  awk -v v="$xrt" -v w="$words" 'BEGIN { exit !(v > 0 && w >= 1) }' || bad "$2: no xRT or words ($row)"
  echo "check_bench_ws: $2: $row"
}

export COSYVOICE_LIB=$PWD/$B/lib/libcosyvoice.so.0 PYTHONPATH=$PWD/python
PY=${SERVER_PY:-${PYTHON:-python3}}
WS=0
if [ -f "$COSYVOICE_LIB" ] && "$PY" -c 'import fastapi, uvicorn, websockets, numpy' 2>/dev/null; then WS=1
else echo "check_bench_ws: SKIP the WebSocket part: $PY lacks fastapi, uvicorn, websockets or numpy, or no $COSYVOICE_LIB"; fi
VOICE=()
if [ $WS = 1 ]; then
  "$PY" bench/serve_w1.py make-voice -m "$TEST_MODEL" --prompt-wav "$tmp/prompt.wav" \
    -o "$tmp/voices/w1.gguf" > "$tmp/voice.log" 2>&1 || { cat "$tmp/voice.log"; bad "make-voice failed"; }
  VOICE=(--voice "$tmp/voices/w1.gguf")
fi
TS=(--text-stream 20,40 --level-s 2 --skip 0 --seed 1 --ts-lines 1 --texts "$tmp/texts.txt")
ARGS=(-m "$TEST_MODEL" --warmup 1 --prompt-wav "$tmp/prompt.wav" --device -1 --concurrency 2)
mkdir -p "$tmp/dump"
rc=0
"$BW" "${ARGS[@]}" "${VOICE[@]}" "${TS[@]}" --ts-dump "$tmp/dump" > "$tmp/inproc.log" 2>&1 || rc=$?
[ $rc = 0 ] || bad "bench_w1 --text-stream exited $rc"
check_row "$tmp/inproc.log" "in process"
grep -q '^W4 text stream: ' "$tmp/inproc.log" || bad "no W4 line"
ls "$tmp/dump"/s0_u0.f32 "$tmp/dump"/s1_u0.f32 > /dev/null 2>&1 || bad "--ts-dump wrote no audio"
[ "$(cut -f1,2 "$tmp/dump/index.tsv" | sort -u | wc -l)" -ge 2 ] || bad "--ts-dump's index.tsv"

# bad options: exit 2 with a message naming the option
for b in "--text-stream 0,1" "--text-stream 40,20" "--text-stream 20" "--ts-lines 0" \
         "--ts-tokens-per-word 0.5"; do
  rc=0
  # shellcheck disable=SC2086
  "$BW" "${ARGS[@]}" "${TS[@]}" $b > "$tmp/bad.log" 2>&1 || rc=$?
  [ $rc = 2 ] || bad "$b: exit $rc, not 2"
  grep -q -- "${b%% *}" "$tmp/bad.log" || bad "$b: the message does not name ${b%% *}"
done
rc=0
"$BW" "${ARGS[@]}" --ts-dump "$tmp/dump" > "$tmp/bad.log" 2>&1 || rc=$?
{ [ $rc = 2 ] && grep -q -- --text-stream "$tmp/bad.log"; } || bad "--ts-dump without --text-stream: exit $rc"

if [ $WS = 1 ]; then
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$PY" -m cosyvoice.server --model "$TEST_MODEL" --voices "$tmp/voices" --device -1 --max-active 2 \
    --host 127.0.0.1 --port "$port" --log-level warning > "$tmp/server.log" 2>&1 &
  SRV=$!
  trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null || true; rm -rf "$tmp"' EXIT
  "$PY" - "$port" "$SRV" <<'EOF' || bad "the server did not start: $(tail -5 "$tmp/server.log")"
import os, socket, sys, time
t0 = time.time()
while time.time() - t0 < 60:
    try:
        os.kill(int(sys.argv[2]), 0)
    except OSError:
        sys.exit(1)
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close(); sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
  URL=http://127.0.0.1:$port
  rc=0
  "$PY" bench/serve_ws.py run --url "$URL" --voice w1 --concurrency 2 "${TS[@]}" \
    --compare "$tmp/dump" > "$tmp/ws.log" 2>&1 || rc=$?
  [ $rc = 0 ] || bad "serve_ws.py run exited $rc"
  check_row "$tmp/ws.log" "WebSocket"
  grep -q '^ws audio check: PASS: ' "$tmp/ws.log" || bad "the WebSocket audio is not the in-process audio"
  grep '^ws audio check' "$tmp/ws.log" || true
  # the check can fail: other bytes for one utterance make it say FAIL
  cp -r "$tmp/dump" "$tmp/dump2"
  f=$(ls "$tmp/dump2"/s*_u*.f32 | head -1)
  "$PY" -c 'import numpy as np, sys; a = np.fromfile(sys.argv[1], "<f4"); a[len(a) // 2] += 0.5; a.tofile(sys.argv[1])' "$f"
  rc=0
  "$PY" bench/serve_ws.py run --url "$URL" --voice w1 --concurrency 2 "${TS[@]}" --level-s 1 \
    --skip 0 --compare "$tmp/dump2" > "$tmp/ws2.log" 2>&1 || rc=$?
  { [ $rc = 1 ] && grep -q '^ws audio check: FAIL: ' "$tmp/ws2.log"; } || bad "a changed sample was not found (exit $rc)"
  rc=0
  "$PY" bench/serve_ws.py cancel --url "$URL" --voice w1 --concurrency 2 --rounds 1 --cancel-max 0 \
    --text-stream 20,40 --ts-lines 2 --texts "$tmp/texts.txt" > "$tmp/cancel.log" 2>&1 || rc=$?
  [ $rc = 0 ] || bad "serve_ws.py cancel exited $rc"
  n=$(sed -n 's/^ws cancel: \([0-9]*\) cancels.*/\1/p' "$tmp/cancel.log")
  [ "${n:-0}" -ge 1 ] || bad "no cancel measured"
  grep -qE '^ws cancel: cancel -> last audio frame p50 [0-9.]+ ms p95 [0-9.]+ ms' "$tmp/cancel.log" || bad "no cancel latency line"
  grep -q '^ws cancel: engine state freed after every round: yes' "$tmp/cancel.log" || bad "engine state not freed after the cancels"
  grep '^ws cancel' "$tmp/cancel.log" || true
fi

if [ $fail = 0 ]; then
  echo "check_bench_ws: W4 on the CPU (2 sessions, 2 s): ok"
else
  for f in inproc.log ws.log ws2.log cancel.log server.log; do
    [ -f "$tmp/$f" ] && { echo "--- $f"; cat "$tmp/$f"; }
  done
fi
exit $fail
