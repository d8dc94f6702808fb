# Sourced by the CPU checks of bench_w1 (tests/check_bench_multi.sh, tests/check_bench_w3.sh,
# tests/check_trace_summary.sh):
# bench_inputs NAME sets B, TEST_MODEL and BW (the bench_w1 binary), exits 0 with a SKIP line
# when the test model is missing, and otherwise makes $tmp (removed on exit) with texts.txt (two
# short lines) and prompt.wav (2 s of a 220 Hz tone at 16 kHz) for --texts and --prompt-wav.
bench_inputs() {
  B=${B:-build}
  TEST_MODEL=${TEST_MODEL:-$B/test/small-f32.gguf}
  BW=$B/bench/bench_w1
  if [ ! -f "$TEST_MODEL" ]; then
    echo "SKIP: $1: no test model $TEST_MODEL"
    exit 0
  fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/cosy-$1-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  printf 'Hello there, this is a test.\nThe quick brown fox jumps over the lazy dog.\n' > "$tmp/texts.txt"
  "${PYTHON:-python3}" - "$tmp/prompt.wav" <<'PYEOF'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb")
w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * i / 16000) *
                                             math.sin(math.pi * i / 32000))) for i in range(32000)))
w.close()
PYEOF
}
