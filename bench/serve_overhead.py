#!/usr/bin/env python3
"""serve_overhead.py - what the HTTP serving path (cosyvoice.server + bench/serve_w1.py's client)
adds to W1, measured on a CPU machine: the server runs a stand-in engine that delivers each
request's chunks on a fixed schedule shaped like the full model's on the H100 (bench/RESULTS.md,
"Serving overhead"), so whatever the HTTP rows lose against the in-process rows is the server and
the load generator, not the engine.

    make CUDA=0 lib        # the package still loads the library (cosy_synth_params_init)
    COSYVOICE_LIB=build/lib/libcosyvoice.so.0 PYTHONPATH=python \\
        build/venv/bin/python bench/serve_overhead.py --concurrency 1,64

Rows: "in process" drives the stand-in engine from C Python threads through the package's pull
API (Request.read, as a bench_w1 client thread would); "http" starts cosyvoice.server's
main() (the same uvicorn setup) on the stand-in engine in a second process and runs
serve_w1.py's level() against it (the same client, measures and table as on the GPU machine).
The difference between the two rows of a level is the serving overhead.

The stand-in's schedule (per request, fixed when it is submitted; n = the level's C, so that a
client that starts its requests late or unevenly loses wall time as it would against the GPU
engine, whose aggregate rate needs all C requests batched; --n active takes the requests active
at submit instead): the chunks of the real scheduler for --tokens speech tokens and an 87-token prompt
(docs/scheduler.md, section 2: 38, 50, 100, ... tokens, the rest last; 960 samples a token); the
first after ttfb(n) = ttfb1 + (ttfb64 - ttfb1) (n - 1) / 63, the others when their tokens exist
at a per-request speed of min(speed1, xrt_max / n) times real time. Defaults: ttfb1 50 ms, ttfb64
556 ms, speed1 38 (C = 1: RTF ~0.028), xrt_max 180 (C = 64: the H100's 180 xRT). It uses no CPU
while it waits (a condition variable), so on a small machine the numbers are the serving path's
own CPU cost and its latency.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))   # cosyvoice (and cosyvoice.server) of this tree

import serve_w1  # noqa: E402

RATE = 24000
SAMPLES_PER_TOKEN = 960
PROMPT_TOKENS = 87


def chunk_tokens(tokens, prompt=PROMPT_TOKENS, first=25):
    """The scheduler's chunk sizes in speech tokens (docs/scheduler.md, section 2)."""
    pad = -(-prompt // 25) * 25 - prompt
    out, hop, base, left = [], first + pad, first, tokens
    while left > 0:
        if left < hop + 3:   # not enough for a streaming chunk: the rest is the last
            out.append(left)
            break
        out.append(hop)
        left -= hop
        base = min(100, 2 * base)
        hop = base
    return out


class Schedule:
    def __init__(self, ttfb1=0.050, ttfb64=0.556, speed1=38.0, xrt_max=180.0):
        self.ttfb1, self.ttfb64, self.speed1, self.xrt_max = ttfb1, ttfb64, speed1, xrt_max

    def times(self, tokens, n):
        """[(seconds after submit, samples)] of one request while n are active."""
        ttfb = self.ttfb1 + (self.ttfb64 - self.ttfb1) * (n - 1) / 63.0
        speed = min(self.speed1, self.xrt_max / n)
        sizes = chunk_tokens(tokens)
        out, t, done = [], ttfb, 0
        for k, c in enumerate(sizes):
            if k > 0:
                t = ttfb + (done + c - sizes[0]) / 25.0 / speed
            out.append((t, c * SAMPLES_PER_TOKEN))
            done += c
        return out


class FakeVoice:
    def close(self):
        pass


class FakeEngine:
    """What server.py uses of cosyvoice.Engine, delivering on a Schedule."""

    def __init__(self, schedule, fixed_n=0):
        import cosyvoice
        self.fixed_n = fixed_n
        self.cosyvoice = cosyvoice
        self.schedule = schedule
        self.mu = threading.Lock()
        self.active = 0
        self.done = 0
        self.samples = 0
        self.closed = False
        self.sample_rate = RATE

    def load_voice(self, path):
        return FakeVoice()

    def submit(self, voice, text, params=None, **kw):
        tokens = (params.max_tokens if params is not None else kw.get("max_tokens")) or 112
        with self.mu:
            self.active += 1
            n = self.active
        return FakeRequest(self, self.schedule.times(tokens, self.fixed_n or n))

    def _finished(self, samples):
        with self.mu:
            self.active -= 1
            self.done += 1
            self.samples += samples

    def stats(self):
        E = self.cosyvoice.EngineStats
        with self.mu:
            vals = dict(active=self.active, queued=0, requests_done=self.done,
                        audio_samples_out=self.samples)
        return E(**{f: vals.get(f, 0) for f in E.__dataclass_fields__})

    def close(self):
        self.closed = True


def _request_base():
    from cosyvoice.engine import Request
    return Request


class FakeRequest(_request_base()):
    """cosyvoice.Request with read()/cancel()/close() on the schedule: achunks(),
    close_when_idle() and the reader thread are the package's own."""

    def __init__(self, engine, times):
        super().__init__(object(), RATE)
        self.eng = engine
        self.t0 = time.monotonic()
        self.times = times
        self.k = 0
        self.cv = threading.Condition()
        self.cancelled = False
        self.finished = False
        self.sent = 0

    def _finish(self):
        if not self.finished:
            self.finished = True
            self.eng._finished(self.sent)

    def read(self, max_samples=1 << 18, timeout=None):
        buf = np.empty(max_samples, dtype=np.float32)   # as the package's read
        with self.cv:
            while True:
                if self.cancelled:
                    self._finish()
                    raise self.eng.cosyvoice.Cancelled(11, "request cancelled", "fake read")
                if self.k >= len(self.times):
                    self._finish()
                    return buf[:0].copy()
                t, n = self.times[self.k]
                wait = self.t0 + t - time.monotonic()
                if wait <= 0:
                    break
                self.cv.wait(wait)
            self.k += 1
        n = min(n, max_samples)
        buf[:n] = 0.01
        self.sent += n
        return buf if n == max_samples else buf[:n].copy()

    def cancel(self):
        with self.cv:
            self.cancelled = True
            self.cv.notify_all()

    def close(self):
        with self._mu:
            if self._reader is not None and self._reader is not threading.current_thread():
                raise RuntimeError("close() while achunks() reads: use close_when_idle()")
            self._h = None
        with self.cv:
            self._finish()

    def stats(self):
        RS = self.eng.cosyvoice.RequestStats
        return RS(**{f: 0 for f in RS.__dataclass_fields__})


# ---- the two paths -------------------------------------------------------------------------------
class InprocClient:
    """A bench_w1 client thread on the stand-in engine (pull API)."""
    rate = RATE

    def __init__(self, engine):
        self.e = engine

    def run(self, text, seed, tokens):
        tr = serve_w1.Track(self.rate)
        r = self.e.submit(None, text, max_tokens=tokens)
        try:
            while True:
                c = r.read()
                if c.size == 0:
                    return tr
                tr.arrived(c.size)
        finally:
            r.close()

    def close(self):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def schedule_args(a):
    return ["--ttfb1", str(a.ttfb1), "--ttfb64", str(a.ttfb64), "--speed1", str(a.speed1),
            "--xrt-max", str(a.xrt_max)]


def serve(a):
    """The server process: server.main() with the stand-in engine."""
    from cosyvoice.server import cli as server
    sched = Schedule(a.ttfb1, a.ttfb64, a.speed1, a.xrt_max)
    server.main(["--model", "stand-in", "--voices", a.voices, "--port", str(a.port),
                 "--log-level", "warning", *a.server_args],
                engine_factory=lambda settings: FakeEngine(sched, a.fixed_n))
    return 0


def wait_port(port, proc, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def run(a):
    levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    texts = ["Stand-in text %d for the serving overhead measure." % i for i in range(64)]
    sched = Schedule(a.ttfb1, a.ttfb64, a.speed1, a.xrt_max)
    print(f"serve_overhead: stand-in schedule ttfb1 {1e3 * a.ttfb1:.0f} ms, ttfb64 "
          f"{1e3 * a.ttfb64:.0f} ms, speed1 {a.speed1}, xrt_max {a.xrt_max}; {a.tokens} tokens "
          f"(chunks {chunk_tokens(a.tokens)}); {os.cpu_count()} CPUs", flush=True)
    hdr = (f"{'C':>5} {'reqs':>5} {'ttfb_p50':>9} {'ttfb_p95':>9} {'rtf_p50':>8} {'rtf_p95':>8} "
           f"{'xRT':>7} {'underrun':>9} {'chars/s':>9}")
    rows = {}
    if "inproc" in a.paths:
        print("== in process (stand-in engine, pull API)\n" + hdr, flush=True)
        for C in levels:
            eng = FakeEngine(sched, C if a.n == "fixed" else 0)
            total = a.requests or (8 if C < 4 else 2 * C)
            rows[("inproc", C)] = serve_w1.level(lambda: InprocClient(eng), texts, C, total,
                                                 a.tokens, 0)[1]
    if "http" in a.paths:
        print(f"== http (cosyvoice.server on the stand-in, serve_w1.py's client)\n{hdr}",
              flush=True)
        for C in levels:   # a server per level (its stand-in's n is the level's C)
            port = free_port()
            with tempfile.TemporaryDirectory() as vd:
                open(os.path.join(vd, "w1.gguf"), "wb").close()
                cmd = [sys.executable, os.path.abspath(__file__), "serve", "--port", str(port),
                       "--voices", vd, "--fixed-n", str(C if a.n == "fixed" else 0),
                       *schedule_args(a)]
                if a.server_args:
                    cmd += ["--server-args", *a.server_args]
                proc = subprocess.Popen(cmd)
                try:
                    if not wait_port(port, proc):
                        print("serve_overhead: the server did not start", flush=True)
                        return 1
                    url = f"http://127.0.0.1:{port}"
                    cl = serve_w1.HttpClient(url, "w1", "cosyvoice3")
                    for w in range(a.warmup):
                        cl.run(texts[w], 1, a.tokens)
                    cl.close()
                    total = a.requests or (8 if C < 4 else 2 * C)
                    if a.client == "threads":
                        rows[("http", C)] = serve_w1.level(
                            lambda: serve_w1.HttpClient(url, "w1", "cosyvoice3"), texts, C,
                            total, a.tokens, 0)[1]
                    else:
                        rows[("http", C)] = serve_w1.level_async(url, "w1", "cosyvoice3", texts,
                                                                 C, total, a.tokens, 0)[1]
                finally:
                    proc.terminate()
                    proc.wait()
    if "inproc" in a.paths and "http" in a.paths:
        print("== overhead (http - in process): TTFB p50 / p95, xRT loss", flush=True)
        for C in levels:
            i, h = rows[("inproc", C)], rows[("http", C)]
            print(f"{C:5d} {1e3 * (h['ttfb_p50'] - i['ttfb_p50']):+8.1f}ms "
                  f"{1e3 * (h['ttfb_p95'] - i['ttfb_p95']):+8.1f}ms "
                  f"{100 * (1 - h['xrt'] / i['xrt']):+7.1f}%", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode")
    for p in (ap, sub.add_parser("serve")):
        p.add_argument("--ttfb1", type=float, default=0.050)
        p.add_argument("--ttfb64", type=float, default=0.556)
        p.add_argument("--speed1", type=float, default=38.0)
        p.add_argument("--xrt-max", type=float, default=180.0)
        p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                       help="the rest of the line goes to server.py (e.g. --max-active 64)")
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=112)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--paths", default="inproc,http")
    ap.add_argument("--client", choices=("threads", "async"), default="async",
                    help="serve_w1.py's client: C threads with httpx, or one asyncio loop")
    ap.add_argument("--n", choices=("fixed", "active"), default="fixed",
                    help="the stand-in's n: the level's C (fixed) or the requests active at submit")
    sp = sub.choices["serve"]
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--voices", required=True)
    sp.add_argument("--fixed-n", type=int, default=0)
    a = ap.parse_args()
    if a.mode == "serve":
        return serve(a)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
