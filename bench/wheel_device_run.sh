#!/usr/bin/env bash
# The Python package's GPU wheel on a GPU machine without network (bench/device_run.sh step
# wheel, after its build step): build the wheel as a release would (python/setup.py,
# COSYVOICE_CUDA=1 COSYVOICE_CUDA_ARCHS=all: sm_80 ... sm_120 + PTX, in build/wheel), install it
# into a fresh virtual environment in a temporary directory, and from there:
#   1. check: the library loaded is the package's own, it names every target, and it synthesizes
#      on device 0 (blocking == streaming, sample for sample) with the CUDA runtime and cuBLAS of
#      the system (debug_info lists where they came from);
#   2. W1 through the HTTP server at C = 1 and 16 (bench/serve_device_run.sh http) twice: once in
#      the wheel's environment (SERVE_VENV), once in-tree (build/dev's library), so that the rows
#      compare the wheel against the in-tree build (target: TTFB and xRT within 10%).
#
#   bash bench/wheel_device_run.sh MODEL.gguf [check] [serve]     (default: check serve)
#
# What it expects besides what bench/device_run.sh expects:
#   .dev/wheels_build/  setuptools (>= 70.1; pure Python) for the wheel build, unless the device's
#                       python3 has it:  pip download --no-deps setuptools -d .dev/wheels_build
#   .dev/wheels*/       the serving wheels bench/serve_device_run.sh names (step serve)
# Logs: $OUT/wheel/ (OUT default build/dev/out). Summary lines start with "wheel".
set -u
cd "$(dirname "$0")/.."
export LC_ALL=C PYTHONUNBUFFERED=1
MODEL=$(realpath "${1:?usage: wheel_device_run.sh MODEL.gguf [check] [serve]}")
shift
STEPS=${*:-check serve}
OUT=${OUT:-build/dev/out}
W=$OUT/wheel
mkdir -p "$W"
SUMMARY=$W/summary.txt
: > "$SUMMARY"
note() { echo "wheel: $*" | tee -a "$SUMMARY"; }

# a build environment over the system's site-packages, with setuptools from the carry when the
# system's is missing or too old
BV=$PWD/.dev/wheel-build-venv
[ -x "$BV/bin/python" ] || python3 -m venv --system-site-packages "$BV"
if ! "$BV/bin/python" -c "import setuptools, sys; \
    sys.exit(tuple(int(x) for x in setuptools.__version__.split('.')[:2]) < (70, 1))" 2>/dev/null; then
  "$BV/bin/python" -m pip install -q --no-index --no-deps .dev/wheels_build/*.whl || {
    note "FAIL: no setuptools >= 70.1 (put its wheel in .dev/wheels_build)"; exit 1; }
fi
t0=$(date +%s)
rm -rf "$W/dist"
COSYVOICE_CUDA=1 COSYVOICE_CUDA_ARCHS=${WHEEL_ARCHS:-all} COSYVOICE_BUILD_DIR=$PWD/build/wheel \
  "$BV/bin/python" -m pip wheel -v --no-build-isolation --no-deps --no-index -w "$W/dist" ./python \
  > "$W/build.log" 2>&1 || { tail -30 "$W/build.log"; note "FAIL: the wheel build (build.log)"; exit 1; }
WHL=$(ls "$W"/dist/cosyvoice-*.whl)
note "built $(basename "$WHL") ($(du -m "$WHL" | cut -f1) MB) in $(($(date +%s) - t0)) s"

# the fresh environment (over the system's site-packages for numpy, as bench/serve_device_run.sh)
V=$(mktemp -d "${TMPDIR:-/tmp}/cosyvoice-wheel-venv.XXXXXX")
python3 -m venv --system-site-packages "$V"
NPDIR=$(python3 -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))' 2>/dev/null)
SP=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -n "$NPDIR" ] && echo "$NPDIR" > "$SP/cosy_system_numpy.pth"
"$V/bin/python" -m pip install -q --no-index --no-deps "$WHL"

SHARED=$PWD/.dev/shared
[ -d "$SHARED/audio" ] || SHARED=$(cd .. && pwd)/shared
VOICES=$W/voices
mkdir -p "$VOICES"
# bench_w1's voice (as bench/serve_device_run.sh makes it), with the wheel's package
(cd "$V" && env -u COSYVOICE_LIB -u PYTHONPATH "$V/bin/python" "$OLDPWD/bench/serve_w1.py" make-voice \
  -m "$MODEL" --prompt-wav "$SHARED/audio/zero_shot_prompt.wav" -o "$VOICES/w1.gguf") \
  > "$W/voice.log" 2>&1 || note "FAIL: make-voice (voice.log)"

if [[ " $STEPS " == *" check "* ]]; then
  # the same synthesis with the wheel's library and with the in-tree one (build/dev)
  CHECK=$(cat <<'EOF'
import os, sys
import numpy as np
import cosyvoice
info = cosyvoice.debug_info()
print("library:", info["library"])
print("version:", info["version"])
for k, v in info["cuda_libraries"].items():
    print(f"  {k}: {v}")
with cosyvoice.Engine(sys.argv[1], device=0) as eng, eng.load_voice(sys.argv[2]) as voice:
    i = eng.info()
    print("engine:", i["backend"], i["device_name"], f"sm_{i['cc_major']}{i['cc_minor']}")
    pcm = eng.synthesize(voice, "Hello from the wheel, on the GPU.", seed=11)
    assert pcm.size > 0 and np.isfinite(pcm).all(), pcm.size
    np.save(sys.argv[3], pcm)
    print(f"synthesized {pcm.size} samples")
EOF
)
  (cd "$V" && env -u COSYVOICE_LIB -u PYTHONPATH "$V/bin/python" -c "$CHECK" "$MODEL" \
    "$VOICES/w1.gguf" "$W/wheel.npy") > "$W/check_wheel.log" 2>&1
  rc=$?
  INTREE=$PWD/build/dev/lib/libcosyvoice.so.0
  (cd "$V" && COSYVOICE_LIB=$INTREE PYTHONPATH= "$V/bin/python" -c "$CHECK" "$MODEL" \
    "$VOICES/w1.gguf" "$W/intree.npy") > "$W/check_intree.log" 2>&1
  # the package's own library, every target named, the same audio as the in-tree build
  "$V/bin/python" - "$W" "$SP" <<'EOF' >> "$W/check_wheel.log" 2>&1
import os, sys
import numpy as np
w, sp = sys.argv[1], sys.argv[2]
log = open(os.path.join(w, "check_wheel.log")).read()
lib = [l for l in log.splitlines() if l.startswith("library:")][0].split(None, 1)[1]
assert lib.startswith(os.path.join(sp, "cosyvoice")), f"loaded {lib}, not the package's library"
for t in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "compute_90"):
    assert t in log, f"{t} missing from the version string"
a, b = np.load(os.path.join(w, "wheel.npy")), np.load(os.path.join(w, "intree.npy"))
d = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
print(f"wheel vs in-tree: {a.size} vs {b.size} samples, max |diff| {d:.3g}")
print("CHECK PASS")
EOF
  [ $rc = 0 ] && grep -q "CHECK PASS" "$W/check_wheel.log" && res=PASS || res=FAIL
  note "check $res: $(grep -E '^version:' "$W/check_wheel.log"); $(grep -E '^engine:' "$W/check_wheel.log");" \
    "$(grep -E '^wheel vs in-tree' "$W/check_wheel.log")"
  grep -E '^  lib' "$W/check_wheel.log" | sed 's/^/wheel:   /' | tee -a "$SUMMARY"
fi

if [[ " $STEPS " == *" serve "* ]]; then
  # W1 at C = 1 and 16 through the HTTP server: the wheel's environment, then the in-tree build
  for which in wheel intree; do
    if [ $which = wheel ]; then
      OUT=$W SERVE_DIR=serve_wheel SERVE_VENV=$V SERVE_LEVELS=1,16 NO_INPROC=1 \
        bash bench/serve_device_run.sh "$MODEL" http > "$W/serve_wheel.log" 2>&1
    else
      OUT=$W SERVE_DIR=serve_intree SERVE_LEVELS=1,16 NO_INPROC=1 \
        bash bench/serve_device_run.sh "$MODEL" http > "$W/serve_intree.log" 2>&1
    fi
    note "serve $which (HTTP, W1): $(grep -E '^ +(C|1|16) ' "$W/serve_$which/summary.txt" | head -3 | \
      tr -s ' ' | paste -sd'|')"
  done
fi
echo "venv: $V" >> "$SUMMARY"
