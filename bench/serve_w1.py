#!/usr/bin/env python3
"""serve_w1.py - workload W1 (as bench/bench_w1.c runs it in process) driven through a server:
the speech server's HTTP endpoint (cosyvoice.server) or Triton's gRPC streaming (serving/triton).

    # the voice bench_w1 makes in process (same prompt mel, same pseudo-random prompt tokens and
    # speaker embedding), saved where the servers read voices:
    python3 bench/serve_w1.py make-voice -m MODEL --prompt-wav ../shared/audio/zero_shot_prompt.wav \
        -o VOICES/w1.gguf

    # HTTP (start the server first; --max-active >= the largest C):
    python3 -m cosyvoice.server --model MODEL --voices VOICES --device 0 --max-active 256 \
        --host 127.0.0.1 --port 8000 &
    python3 bench/serve_w1.py http --url http://127.0.0.1:8000 --voice w1 --concurrency 1,64 \
        --texts ../shared/bench/w1_texts.txt

    # Triton gRPC streaming (one engine per visible GPU; set max_active in config.pbtxt):
    COSYVOICE_MODEL=MODEL COSYVOICE_VOICES=VOICES python3 serving/triton/launch.py --kind gpu \
        --address 127.0.0.1 &
    python3 bench/serve_w1.py triton --url 127.0.0.1:8001 --voice w1 --concurrency 1,64 \
        --texts ../shared/bench/w1_texts.txt

bench/serve_device_run.sh runs all of it (and bench_w1 of the same build) in one call on a GPU
machine without network.

Same workload and the same measures as bench_w1 (see its header): C client threads each keep one
request in flight (closed loop); request i says line i of the texts file with its length forced
to --tokens speech tokens (min_tokens = max_tokens; seed 1000 + i); --requests per level
(default 8 when C < 4, else 2 C), after --warmup requests that are not measured. Per request:
TTFB = send -> first audio bytes received; RTF = (last bytes - send) / audio seconds; an
underrun is a piece of audio arriving after playback started at the first piece would have run
dry (the count is of requests with at least one). Per level: TTFB p50/p95, RTF p50/p95, xRT
(audio seconds per wall second, all requests), underruns, chars/s. Percentiles are taken as
bench_w1 takes them (the ceil(q n)-th smallest).

The HTTP client asks for response_format pcm (16-bit mono at 24 kHz) with stream_format audio, so
each piece the socket delivers counts as arrived audio; Triton's responses are float32 chunks.
HTTP clients (--client): async (default) runs the C request loops as tasks of one asyncio event
loop over raw keep-alive HTTP/1.1 connections; threads runs C threads with an httpx client each.
At C = 64 the threads client itself adds tens of ms of TTFB (64 Python threads taking turns on
the GIL; bench/serve_overhead.py measures both on a stand-in engine, bench/RESULTS.md). Every
client (connection) is made before a level's clock starts, as bench_w1 makes its engine and voice
first. Only httpx (http) or tritonclient[grpc] (triton) and numpy are needed, and no network but
the loopback to the server.
"""
import argparse
import math
import os
import queue
import sys
import threading
import time

import numpy as np


def pct(values, q):
    if not values:
        return 0.0
    v = sorted(values)
    k = max(int(math.ceil(q * len(v))) - 1, 0)
    return v[k]


class Track:
    """Arrival bookkeeping of one request (bench_w1.c on_chunk)."""

    def __init__(self, rate):
        self.rate = rate
        self.t_send = time.monotonic()
        self.t_first = 0.0
        self.t_last = 0.0
        self.samples = 0
        self.underruns = 0

    def arrived(self, n):
        t = time.monotonic()
        if n <= 0:
            return
        if self.t_first == 0.0:
            self.t_first = t
        elif self.samples > 0 and t - self.t_first > self.samples / self.rate:
            self.underruns += 1
        self.samples += n
        self.t_last = t


# ---- clients -----------------------------------------------------------------------------------
_SSL = []


class HttpClient:
    rate = 24000

    def __init__(self, url, voice, model):
        import ssl

        import httpx
        # one TLS context for every client: httpx.Client() otherwise builds its own (loading the
        # CA bundle, ~10-20 ms holding the GIL), unused over plain http
        if not _SSL:
            _SSL.append(ssl.create_default_context())
        self.c = httpx.Client(base_url=url, timeout=600, verify=_SSL[0])
        self.voice, self.model = voice, model

    def run(self, text, seed, tokens):
        tr = Track(self.rate)
        body = {"model": self.model, "voice": self.voice, "input": text, "response_format": "pcm",
                "seed": seed, "min_tokens": tokens, "max_tokens": tokens}
        odd = 0
        with self.c.stream("POST", "/v1/audio/speech", json=body) as r:
            if r.status_code != 200:
                r.read()
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
            for piece in r.iter_raw():
                n = (len(piece) + odd) // 2
                odd = (len(piece) + odd) % 2
                tr.arrived(n)
        return tr

    def close(self):
        self.c.close()


def level_async(url, voice, model, texts, C, total, tokens, first_index):
    """level() with one asyncio event loop on this thread instead of C threads: C tasks, each
    with its own keep-alive HTTP/1.1 connection (opened before the clock starts), writing the
    request and reading the chunked pcm response straight off the socket (no HTTP library), so
    the client's own cost per piece is a few microseconds."""
    import asyncio
    import json
    from urllib.parse import urlsplit

    u = urlsplit(url)
    host, port = u.hostname, u.port or 80

    async def request(rd, wr, text, seed):
        body = json.dumps({"model": model, "voice": voice, "input": text,
                           "response_format": "pcm", "seed": seed, "min_tokens": tokens,
                           "max_tokens": tokens}).encode()
        tr = Track(HttpClient.rate)
        wr.write(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}:{port}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)
        status = (await rd.readline()).split(b" ", 2)
        headers = {}
        while True:
            line = await rd.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if len(status) < 2 or status[1] != b"200":
            raise RuntimeError(f"HTTP {status[1:2]}")
        if headers.get("transfer-encoding", "").lower() != "chunked":
            raise RuntimeError("expected a chunked response")
        odd = 0
        while True:
            size = int((await rd.readline()).split(b";")[0], 16)
            if size == 0:
                await rd.readline()
                return tr
            left = size
            while left:   # each piece as the socket delivers it
                piece = await rd.read(min(left, 1 << 16))
                if not piece:
                    raise RuntimeError("connection closed mid-response")
                left -= len(piece)
                n = (len(piece) + odd) // 2
                odd = (len(piece) + odd) % 2
                tr.arrived(n)
            await rd.readexactly(2)

    async def main():
        results, errors = [None] * total, []
        nxt = [0]
        conns = [await asyncio.open_connection(host, port) for _ in range(C)]

        async def worker(rd, wr):
            while True:
                i = nxt[0]
                nxt[0] += 1
                if i >= total:
                    return
                text = texts[(first_index + i) % len(texts)]
                try:
                    results[i] = (await request(rd, wr, text, 1000 + first_index + i),
                                  len(text.encode()))
                except Exception as e:   # noqa: BLE001 - counted; the connection is dropped
                    errors.append(str(e))
                    wr.close()
                    rd, wr = await asyncio.open_connection(host, port)

        w0 = time.monotonic()
        await asyncio.gather(*(worker(rd, wr) for rd, wr in conns))
        wall = time.monotonic() - w0
        for _, wr in conns:
            wr.close()
        return results, errors, wall

    results, errors, wall = asyncio.run(main())
    return summarize(C, total, results, errors, wall)


class TritonClient:
    rate = 24000

    def __init__(self, url, voice, model):
        import tritonclient.grpc as g
        self.g = g
        self.c = g.InferenceServerClient(url)
        self.q = queue.Queue()
        self.c.start_stream(callback=lambda result, error: self.q.put((result, error)))
        self.voice, self.model = voice, model
        self.n = 0

    def _in(self, name, arr, dt):
        t = self.g.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr)
        return t

    def run(self, text, seed, tokens):
        ins = [self._in("target_text", np.array([[text.encode()]], dtype=object), "BYTES"),
               self._in("voice", np.array([[self.voice.encode()]], dtype=object), "BYTES"),
               self._in("seed", np.array([[seed]], dtype=np.uint64), "UINT64"),
               self._in("min_tokens", np.array([[tokens]], dtype=np.int32), "INT32"),
               self._in("max_tokens", np.array([[tokens]], dtype=np.int32), "INT32")]
        self.n += 1
        tr = Track(self.rate)
        self.c.async_stream_infer(self.model, ins, request_id=str(self.n),
                                  outputs=[self.g.InferRequestedOutput("waveform")],
                                  enable_empty_final_response=True)
        while True:
            result, error = self.q.get(timeout=600)
            if error is not None:
                raise RuntimeError(f"triton: {error}")
            resp = result.get_response()
            w = result.as_numpy("waveform")
            if w is not None:
                tr.arrived(w.size)
            final = resp.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return tr

    def close(self):
        self.c.stop_stream()
        self.c.close()


# ---- the workload ------------------------------------------------------------------------------
def level(make_client, texts, C, total, tokens, first_index):
    """One level: C threads, each with its own client made before the clock starts (as bench_w1
    makes its engine and voice first), then a closed loop over the total requests."""
    results = [None] * total
    errors = []
    nxt = [0]
    lock = threading.Lock()
    ready = threading.Barrier(C + 1)

    def worker():
        try:
            cl = make_client()
        except Exception as e:   # noqa: BLE001 - reported below
            with lock:
                errors.append(f"client: {e}")
            ready.abort()
            return
        try:
            try:
                ready.wait()
            except threading.BrokenBarrierError:   # another client failed: reported below
                return
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= total:
                    return
                text = texts[(first_index + i) % len(texts)]
                try:
                    tr = cl.run(text, 1000 + first_index + i, tokens)
                    results[i] = (tr, len(text.encode()))
                except Exception as e:   # noqa: BLE001 - a failed request is counted, not fatal
                    with lock:
                        errors.append(str(e))
        finally:
            cl.close()

    ths = [threading.Thread(target=worker) for _ in range(C)]
    for t in ths:
        t.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    w0 = time.monotonic()
    for t in ths:
        t.join()
    wall = time.monotonic() - w0
    return summarize(C, total, results, errors, wall)


def summarize(C, total, results, errors, wall):
    """Print a level's row; (no request failed, the row's numbers)."""
    ok = [r for r in results if r is not None and r[0].samples > 0]
    tt = [r[0].t_first - r[0].t_send for r in ok]
    audio = [r[0].samples / r[0].rate for r in ok]
    rt = [(r[0].t_last - r[0].t_send) / a for r, a in zip(ok, audio)]
    under = sum(1 for r in ok if r[0].underruns > 0)
    chars = sum(r[1] for r in ok)
    print(f"{C:5d} {len(ok):5d} {1e3 * pct(tt, 0.5):8.1f}ms {1e3 * pct(tt, 0.95):8.1f}ms "
          f"{pct(rt, 0.5):8.4f} {pct(rt, 0.95):8.4f} {sum(audio) / wall:7.2f} {under:9d} "
          f"{chars / wall:9.1f}", flush=True)
    if errors:
        print(f"      ({len(errors)} of {total} requests failed; first: {errors[0][:300]})",
              flush=True)
    return len(errors) == 0, {"C": C, "reqs": len(ok), "ttfb_p50": pct(tt, 0.5),
                              "ttfb_p95": pct(tt, 0.95), "rtf_p50": pct(rt, 0.5),
                              "rtf_p95": pct(rt, 0.95), "xrt": sum(audio) / wall,
                              "underruns": under, "wall": wall}


def run_bench(a):
    with open(a.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    if not texts:
        sys.exit(f"serve_w1: no texts in {a.texts}")
    levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        sys.exit(f"serve_w1: bad --concurrency {a.concurrency!r}")
    cls = HttpClient if a.mode == "http" else TritonClient
    model = a.model or ("cosyvoice3" if a.mode == "http" else "cosyvoice")

    def make():
        return cls(a.url, a.voice, model)

    print(f"serve_w1: {a.mode} {a.url}, voice {a.voice}, {a.tokens} tokens/request, "
          f"texts {a.texts}" + (f", client {a.client}" if a.mode == "http" else ""), flush=True)
    cl = make()
    for w in range(a.warmup):   # not measured (the first calls build CUDA graphs and plans)
        cl.run(texts[w % len(texts)], 1, a.tokens)
    cl.close()
    print(f"{a.warmup} warm-up requests done")
    print(f"{'C':>5} {'reqs':>5} {'ttfb_p50':>9} {'ttfb_p95':>9} {'rtf_p50':>8} {'rtf_p95':>8} "
          f"{'xRT':>7} {'underrun':>9} {'chars/s':>9}")
    ok = True
    for C in levels:   # each level starts again at text 0 and seed 1000, as in bench_w1
        total = a.requests or (8 if C < 4 else 2 * C)
        if a.mode == "http" and a.client == "async":
            ok &= level_async(a.url, a.voice, model, texts, C, total, a.tokens, 0)[0]
        else:
            ok &= level(make, texts, C, total, a.tokens, 0)[0]
    return 0 if ok else 1


# ---- the voice bench_w1 makes ----------------------------------------------------------------------
def make_voice(a):
    """bench_w1.c's voice: the prompt wav's mel, 87 prompt tokens and a 192-float speaker
    embedding from its 64-bit LCG, the same prompt text; saved with cosy_voice_save."""
    import cosyvoice
    pcm, rate = cosyvoice.read_wav(a.prompt_wav)
    mel = cosyvoice.audio_to_mel(pcm, rate)
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    tok = []
    for _ in range(87):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        tok.append((x >> 33) % 6561)
    spk = []
    for _ in range(192):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        spk.append((x >> 11) / 9007199254740992.0 * 2.0 - 1.0)
    n_tok = min(mel.shape[0] // 2, 87)
    text = "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。"
    with cosyvoice.Engine(a.model_file) as eng:
        with eng.voice_from_features(tok[:n_tok], mel, np.asarray(spk, dtype=np.float32),
                                     text) as v:
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            v.save(a.out)
    print(f"serve_w1: wrote {a.out} ({mel.shape[0]} mel frames, {n_tok} prompt tokens)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode in ("http", "triton"):
        p = sub.add_parser(mode)
        p.add_argument("--url", required=True,
                       help="http://HOST:PORT (http) or HOST:PORT of Triton's gRPC (triton)")
        p.add_argument("--voice", default="w1", help="saved voice name on the server")
        p.add_argument("--model", help="model name (default cosyvoice3 / cosyvoice)")
        p.add_argument("--concurrency", default="1")
        p.add_argument("--requests", type=int, default=0)
        p.add_argument("--tokens", type=int, default=112)
        p.add_argument("--warmup", type=int, default=2)
        p.add_argument("--texts", default="../shared/bench/w1_texts.txt")
        if mode == "http":
            p.add_argument("--client", choices=("async", "threads"), default="async",
                           help="async: one asyncio loop, raw HTTP/1.1 (default; the cheapest "
                                "load generator); threads: C threads with an httpx client each")
    p = sub.add_parser("make-voice")
    p.add_argument("-m", "--model-file", required=True)
    p.add_argument("--prompt-wav", default="../shared/audio/zero_shot_prompt.wav")
    p.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    if a.mode == "make-voice":
        return make_voice(a)
    if a.tokens < 1 or a.requests < 0 or a.warmup < 0:
        sys.exit("serve_w1: --tokens must be >= 1, --requests and --warmup >= 0")
    return run_bench(a)


if __name__ == "__main__":
    sys.exit(main())
