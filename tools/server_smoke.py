#!/usr/bin/env python3
"""server_smoke.py - the speech server as an installed package serves the official openai client.

    python tools/server_smoke.py --model build/test/small-fe-f32.gguf [--server CMD] [--port N]

Run it with the Python of a virtual environment where `cosyvoice[server]` and `openai` are
installed (e.g. from a wheel, outside the repository: the script imports nothing from the
repository). It writes a 2 s test recording, starts `cosyvoice-server --model MODEL --voice-wav
REC --voice-text ...` (the command on PATH next to this Python, or --server), waits for /health,
then with the openai package: audio.speech.create with the default format (mp3, decoded back with
soundfile), the same streamed (with_streaming_response, pcm), models.retrieve; stops the server
and exits 0, or prints what failed and exits 1. The model must have the front-end models (the
test model build/test/small-fe-f32.gguf has them).
"""
import argparse
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--server", help="the server command (default: cosyvoice-server next to "
                                     "this Python, else on PATH)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=180)
    a = ap.parse_args()
    import numpy as np
    import openai
    import soundfile as sf

    exe = a.server or os.path.join(os.path.dirname(sys.executable), "cosyvoice-server")
    if not a.server and not os.path.exists(exe):
        exe = shutil.which("cosyvoice-server")
    if not exe:
        sys.exit("server_smoke: no cosyvoice-server command (is cosyvoice[server] installed?)")
    port = a.port or free_port()
    work = tempfile.mkdtemp(prefix="cosyvoice-smoke-")
    rec = os.path.join(work, "me.wav")
    t = np.arange(48000) / 24000
    tone = 0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.3 * np.sin(2 * np.pi * 2 * t))
    sf.write(rec, tone.astype(np.float32), 24000, subtype="PCM_16")
    log = open(os.path.join(work, "server.log"), "w")
    cmd = [exe, "--model", a.model, "--voice-wav", rec, "--voice-text", "A test recording.",
           "--port", str(port), "--log-level", "warning"]
    print("server_smoke:", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{port}"
    ok = False
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > a.timeout:
                raise RuntimeError("the server did not become healthy in time")
            time.sleep(0.2)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                               timeout=a.timeout)
        text = "Hello from the installed package."
        mp3 = client.audio.speech.create(model="tts-1", voice="alloy", input=text).read()
        audio, rate = sf.read(io.BytesIO(mp3), dtype="float32")
        print(f"server_smoke: speech.create (mp3): {len(mp3)} bytes, {audio.size / rate:.2f} s "
              f"at {rate} Hz", flush=True)
        if rate != 24000 or audio.size < 2400:
            raise RuntimeError("the mp3 does not decode to speech-length audio at 24 kHz")
        pieces = []
        with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input=text, response_format="pcm") as r:
            for b in r.iter_bytes():
                pieces.append(b)
        n = sum(len(b) for b in pieces)
        print(f"server_smoke: streamed pcm: {n} bytes in {len(pieces)} pieces", flush=True)
        if n < 4800 or n % 2:
            raise RuntimeError("the streamed pcm is too short or not 16-bit")
        m = client.models.retrieve("tts-1")
        if m.id != "tts-1":
            raise RuntimeError(f"models.retrieve gave {m!r}")
        ok = True
    except Exception as e:   # noqa: BLE001 (reported, then the exit status says it)
        print(f"server_smoke: FAILED: {type(e).__name__}: {e}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if not ok:
            print("server_smoke: server log:\n" + open(log.name).read()[-4000:], flush=True)
        shutil.rmtree(work, ignore_errors=True)
    print("server_smoke: ok" if ok else "server_smoke: failed", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
