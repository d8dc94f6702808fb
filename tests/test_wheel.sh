#!/usr/bin/env bash
# The Python distribution as a user gets it (.ci/run, stage wheel): build the wheel once
# (tools/container_build.sh wheel: the Dockerfile's build step), install it with the [server]
# extra into a fresh virtual environment in a temporary directory outside the repository
# (tools/container_build.sh install: the Dockerfile's run step), and from there, with nothing of
# the repository on any path:
#   1. `import cosyvoice` loads the library inside the package (cosyvoice.debug_info()) and
#      synthesizes with the demo model (random weights: tools/make_model.py --preset demo);
#   2. the `cosyvoice-server` console command serves that model, and the official `openai` client
#      (OPENAI_VERSION) calls audio.speech.create with the default response format (mp3) and
#      with streaming (with_streaming_response, pcm), checking the bytes that come back.
# The sdist is checked to carry the C/CUDA sources. Variables: B (the build folder whose objects
# the wheel reuses, default build: in CI the one `make test` built, kernels included where nvcc
# is), KEEP=1 (leave the temporary directory), COSY_WHEEL_SERVER=0 (skip step 2, for a package
# without the console command). Run from the repository root: bash tests/test_wheel.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
B=${B:-build}
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
OPENAI_VERSION=${OPENAI_VERSION:-3.57.0}
PORT=${COSY_WHEEL_PORT:-18731}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cosyvoice-wheel.XXXXXX")
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "test_wheel: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
fail() { echo "test_wheel: FAIL: $*" >&2; exit 1; }

echo "== the wheel (reusing the objects of $B)"
t0=$(date +%s)
COSYVOICE_BUILD_DIR="$B" bash "$ROOT/tools/container_build.sh" wheel "$WORK/dist"
echo "test_wheel: wheel and sdist built in $(($(date +%s) - t0)) s"
whl=$(ls "$WORK"/dist/cosyvoice-*.whl)
case "$whl" in *-py3-none-manylinux_*_x86_64.whl|*-py3-none-linux_x86_64.whl) ;;
  *) fail "$(basename "$whl"): expected a py3-none-<platform> wheel" ;; esac
python3 -m zipfile -l "$whl" > "$WORK/wheel.txt"
grep -q 'cosyvoice/lib/libcosyvoice.so.0' "$WORK/wheel.txt" || fail "no library in the wheel"
sdist=$(ls "$WORK"/dist/cosyvoice-*.tar.gz)
tar tzf "$sdist" > "$WORK/sdist.txt"
for f in native/Makefile native/include/cosyvoice.h native/lib/api.c native/kernels/gemv.cu setup.py; do
  grep -q "^cosyvoice-[^/]*/$f\$" "$WORK/sdist.txt" || fail "the sdist lacks $f"
done
echo "test_wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB), $(basename "$sdist") carries the sources"

echo "== a fresh virtual environment outside the repository"
bash "$ROOT/tools/container_build.sh" install "$WORK/dist" "$WORK/venv" server
"$WORK/venv/bin/python" -m pip install -q "openai==$OPENAI_VERSION"
# the demo model and voice, copied out of the repository
make -s -C "$ROOT" B="$B" "$B/demo/demo.gguf" >/dev/null
mkdir -p "$WORK/models/voices"
cp "$B/demo/demo.gguf" "$WORK/models/demo.gguf"
cp "$B/demo/demo-voice.gguf" "$WORK/models/voices/alloy.gguf"
cd "$WORK"
unset COSYVOICE_LIB PYTHONPATH LD_LIBRARY_PATH

echo "== 1. import cosyvoice and synthesize"
"$WORK/venv/bin/python" - "$WORK" <<'EOF'
import os, sys
import cosyvoice
work = sys.argv[1]
pkg = os.path.dirname(cosyvoice.__file__)
assert pkg.startswith(work), f"cosyvoice imported from {pkg}, not the fresh environment"
info = cosyvoice.debug_info()
assert info["library"] == os.path.join(pkg, "lib", "libcosyvoice.so.0"), info
print("library:", info["library"])
print("version:", info["version"], "| build:", info["build_info"])
for soname, where in info["cuda_libraries"].items():
    print(f"  {soname}: {where}")
models = os.path.join(work, "models")
with cosyvoice.Engine(os.path.join(models, "demo.gguf")) as eng, \
        eng.load_voice(os.path.join(models, "voices", "alloy.gguf")) as voice:
    pcm = eng.synthesize(voice, "Hello from the wheel.", seed=7)
    streamed = [c for c in eng.stream(voice, "Hello from the wheel.", seed=7)]
    assert pcm.size > 0 and eng.sample_rate == 24000, (pcm.size, eng.sample_rate)
    n = sum(c.size for c in streamed)
    assert n == pcm.size, (n, pcm.size)
    print(f"synthesized {pcm.size} samples ({pcm.size / eng.sample_rate:.2f} s), streamed the same "
          f"in {len(streamed)} chunks")
EOF

if [ "${COSY_WHEEL_SERVER:-1}" = 0 ]; then
  echo "test_wheel: SKIP: the server (COSY_WHEEL_SERVER=0)"
  echo "test_wheel: ok"
  exit 0
fi
echo "== 2. cosyvoice-server + the openai client"
[ -x "$WORK/venv/bin/cosyvoice-server" ] || \
  fail "the wheel installs no cosyvoice-server command (the [server] extra's console script)"
COSYVOICE_VOICES="$WORK/models/voices" "$WORK/venv/bin/cosyvoice-server" \
  --model "$WORK/models/demo.gguf" --host 127.0.0.1 --port "$PORT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
"$WORK/venv/bin/python" - "$PORT" "$SERVER_PID" <<'EOF' || { cat "$WORK/server.log"; fail "the server did not become healthy"; }
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            if r.status == 200:
                print("health:", r.read().decode()[:200])
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("no healthy /health in 120 s")
EOF
"$WORK/venv/bin/python" - "$PORT" <<'EOF' || { cat "$WORK/server.log"; fail "the openai client calls"; }
import sys
from openai import OpenAI
client = OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="not-needed")
text = "Hello from the wheel, through the OpenAI client."
# the default response format (OpenAI's: mp3)
r = client.audio.speech.create(model="tts-1", voice="alloy", input=text)
data = r.content
is_mp3 = data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)
assert len(data) > 1000 and is_mp3, (len(data), data[:16])
print(f"speech.create (default format): {len(data)} bytes of mp3")
# streaming: the response body read as it arrives
n = chunks = 0
with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm") as s:
    for b in s.iter_bytes():
        n += len(b)
        chunks += 1
assert n > 0 and n % 2 == 0, n
print(f"speech.create streaming (pcm): {n} bytes ({n / 2 / 24000:.2f} s of 24 kHz audio) in "
      f"{chunks} reads")
EOF
echo "test_wheel: ok"
