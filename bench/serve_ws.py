#!/usr/bin/env python3
"""serve_ws.py - workload W4 (text streamed in by simulated LLMs, bench_w1 --text-stream) through
the speech server's WebSocket (/v1/audio/speech/stream, docs/websocket.md), and barge-in timing.

    # the voice bench_w1 makes in process, saved where the server reads voices
    python3 bench/serve_w1.py make-voice -m MODEL --prompt-wav WAV -o VOICES/w1.gguf
    python3 -m cosyvoice.server --model MODEL --voices VOICES --device 0 --max-active 64 --port 8000 &

    # W4 at C = 64, as bench_w1 -m MODEL --device 0 --text-stream 20,40 --concurrency 64
    #   --ts-dump DIR runs it in process; --compare DIR checks the audio against that run's
    python3 bench/serve_ws.py run --url http://127.0.0.1:8000 --voice w1 --concurrency 64 \
        --text-stream 20,40 --texts ../shared/bench/w1_texts.txt --compare DIR

    # barge-in: C sessions each cancel an utterance at a random time after its first audio
    python3 bench/serve_ws.py cancel --url http://127.0.0.1:8000 --voice w1 --concurrency 64 \
        --text-stream 20,40 --texts ../shared/bench/w1_texts.txt

run: the sessions of bench_w1's W4 (its header in bench/bench_w1.c says it all): session k draws
from its own splitmix64 stream seeded from --seed and k, its writing rate (uniform in --text-stream
WPS_MIN,WPS_MAX words a second) once, then per utterance the first line of the texts and the
seed; an utterance is --ts-lines lines joined by a space, pushed as its words with the white space
after each (one "text" message each, word i at t0 + i / rate), then "end"; max_tokens =
--ts-tokens-per-word x words (the session message before each utterance sets seed and max_tokens:
random weights never sample the stop token). The next utterance starts when the previous one's
"done" came; none starts after --level-s s; those started in the first --skip s are not counted.
The same texts, pieces, times, seeds and bounds as bench_w1's sessions, so the rows compare. Per
utterance: first audio = the first "text" sent -> the first binary frame; an underrun is a frame
arriving after playback from the first frame in real time would have run dry (the audio before it
at 24 kHz, 16-bit); per level the row bench_w1 prints (C, utterances, failed, first audio
p50/p95/p99, utterances with an underrun, the latest frame's lateness, xRT over the counted window,
mean words, audio seconds and writing seconds). Each session's connection (and its voice
setting) is made before the level's clock starts, as bench_w1 makes its engine first.

--compare DIR: bench_w1 --ts-dump DIR wrote the float32 audio of sessions 0..3 and index.tsv
(session, utterance, seed, max_tokens, text); every utterance of those sessions that both runs
made must have the same draws (seed, bound, text: else the two programs' generators disagree) and
the same bytes: the in-process samples through the server's conversion (cosyvoice.to_pcm16:
clipped, x 32767, rounded) against the binary frames received. Prints "ws audio check: PASS ..."
or "... FAIL ..." with the number of utterances compared and the largest difference in 16-bit
steps. The engine's flow and vocoder are not batch-invariant (docs/gpus.md): the check shows
whether the audio of a session depends on its neighbours in the two runs.

cancel: C sessions (one connection each) for --rounds rounds; in each round every session starts
one utterance (as run does, after a random delay in [0, 1) s), and at a random time after its
first audio frame (uniform in [0, --cancel-max) s, drawn at the utterance's start) sends
"cancel" and stops its text. Measured per cancel: cancel sent -> the last binary frame received
after it (0 when none came), cancel sent -> the "cancelled" event; an utterance whose "done" came
first is not a cancel case (counted apart). After each round, /health's active and queued counts
must come back to what they were before the round (every request's engine state freed) within
--free-timeout s. Printed: p50/p95/max of both, the first audio frame's duration (the first chunk,
the shortest of the streaming schedule's chunks, docs/scheduler.md section 2; median over the
cancels) and whether the p95 to the last frame is within it, and the rounds whose engine counts
came back ("ws cancel: ..." lines).

Exit status: 0, 1 when an utterance failed, the audio check failed or the engine state did not
come back, 2 for bad arguments. Needs the `websockets` package (asyncio client) and numpy.
"""
import argparse
import asyncio
import json
import math
import os
import re
import sys
import time
import urllib.request

import numpy as np

try:
    from websockets.asyncio.client import connect as ws_connect
except ImportError:  # websockets < 13
    from websockets import connect as ws_connect

M64 = (1 << 64) - 1
RATE = 24000
SPACE = "[ \t\n\r\f\v]"
PIECE = re.compile(f"[^ \t\n\r\f\v]+{SPACE}*")


def sm_next(x):
    """splitmix64 (bench_w1.c w3_next): the new state and the output."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Stream:
    """Session k's random stream, as bench_w1's W3 users and W4 sessions seed theirs."""

    def __init__(self, seed, k):
        _, z = sm_next(k)
        self.x = (seed ^ z) & M64

    def next(self):
        self.x, z = sm_next(self.x)
        return z

    def unif(self):
        return (self.next() >> 11) / 9007199254740992.0


def pct(values, q):
    """the ceil(q n)-th smallest, as bench_w1 takes percentiles"""
    if not values:
        return 0.0
    v = sorted(values)
    return v[max(int(math.ceil(q * len(v))) - 1, 0)]


def read_lines(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line:
                out.append(line)
    return out


def lround(x):
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class Plan:
    """The utterances of session k in order (bench_w1.c ts_session's draws)."""

    def __init__(self, a, texts, k):
        self.a, self.texts, self.rng = a, texts, Stream(a.seed, k)
        self.rate = a.wps_min + (a.wps_max - a.wps_min) * self.rng.unif()

    def next(self):
        first = self.rng.next() % len(self.texts)
        seed = self.rng.next()
        text = " ".join(self.texts[(first + i) % len(self.texts)] for i in range(self.a.ts_lines))
        pieces = PIECE.findall(text)
        mt = min(max(lround(self.a.ts_tokens_per_word * len(pieces)), 1), 1000000)
        return text, pieces, seed, mt


class Utt:
    def __init__(self, t0):
        self.t0 = t0
        self.t_first = 0.0
        self.t_last = 0.0
        self.samples = 0
        self.underruns = 0
        self.late = 0.0
        self.first_n = 0
        self.audio = bytearray()
        self.keep = False
        self.words = 0
        self.text_s = 0.0
        self.error = None
        self.end = None          # "done", "cancelled" or "error"
        self.t_end_event = 0.0
        self.t_cancel = 0.0      # cancel sent
        self.t_last_after_cancel = 0.0
        self.first_audio = asyncio.Event()
        self.finished = asyncio.Event()

    def arrived(self, data):
        t = time.monotonic()
        n = len(data) // 2
        if n <= 0:
            return
        if self.t_first == 0.0:
            self.t_first = t
            self.first_n = n
            self.first_audio.set()
        elif self.samples > 0:
            late = t - self.t_first - self.samples / RATE
            if late > 0:
                self.underruns += 1
                self.late = max(self.late, late)
        if self.t_cancel:
            self.t_last_after_cancel = t
        self.samples += n
        self.t_last = t
        if self.keep:
            self.audio += data


class Conn:
    """One WebSocket session: a reader task routes frames and events to the utterance in flight."""

    def __init__(self, ws):
        self.ws = ws
        self.u = None
        self.session_ev = asyncio.Event()
        self.reader = asyncio.ensure_future(self.read())

    async def read(self):
        try:
            async for m in self.ws:
                u = self.u
                if isinstance(m, bytes):
                    if u is not None:
                        u.arrived(m)
                    continue
                ev = json.loads(m)
                t = ev.get("type")
                if t == "session":
                    self.session_ev.set()
                elif t in ("done", "cancelled") and u is not None:
                    u.end, u.t_end_event = t, time.monotonic()
                    u.finished.set()
                elif t == "error":
                    if u is not None and not u.finished.is_set():
                        u.error = ev.get("error", {}).get("message", str(ev))
                        u.end, u.t_end_event = "error", time.monotonic()
                        u.finished.set()
                    else:
                        print(f"serve_ws: error event outside an utterance: {ev}", file=sys.stderr)
        except Exception as e:  # the connection went away: the utterance in flight fails
            if self.u is not None and not self.u.finished.is_set():
                self.u.error = f"connection: {e!r}"
                self.u.end = "error"
                self.u.finished.set()

    async def send(self, **msg):
        await self.ws.send(json.dumps(msg))

    async def close(self):
        await self.ws.close()
        try:
            await asyncio.wait_for(self.reader, 10)
        except (asyncio.TimeoutError, Exception):
            self.reader.cancel()


async def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        await asyncio.sleep(d)


async def open_conns(a, n):
    url = a.url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/") \
        + "/v1/audio/speech/stream"
    conns = []
    for _ in range(n):
        ws = await ws_connect(url, max_size=None, open_timeout=60, ping_interval=None)
        c = Conn(ws)
        await c.send(type="session", voice=a.voice, response_format="pcm", binary=True)
        await asyncio.wait_for(c.session_ev.wait(), 60)
        conns.append(c)
    return conns


async def speak(c, plan_item, rate, keep, cancel_at=None):
    """One utterance on connection c: the session settings, the pieces at their times, end; then
    its done/cancelled/error. cancel_at: seconds after the first audio to send cancel."""
    text, pieces, seed, mt = plan_item
    await c.send(type="session", seed=seed, max_tokens=mt)
    t0 = time.monotonic()
    u = Utt(t0)
    u.keep = keep
    u.words = len(pieces)
    c.u = u
    stop = False

    async def canceller():
        nonlocal stop
        await u.first_audio.wait()
        await sleep_until(u.t_first + cancel_at)
        if u.finished.is_set():
            return
        stop = True
        u.t_cancel = time.monotonic()
        await c.send(type="cancel")

    ct = asyncio.ensure_future(canceller()) if cancel_at is not None else None
    for i, p in enumerate(pieces):
        if i:
            await sleep_until(t0 + i / rate)
        if stop or u.finished.is_set():
            break
        await c.send(type="text", text=p)
    if not stop and not u.finished.is_set():
        await c.send(type="end")
    u.text_s = time.monotonic() - t0
    await u.finished.wait()
    if ct is not None:
        ct.cancel()
    c.u = None
    return u


# ---- run: W4 --------------------------------------------------------------------------------
async def run_level(a, texts, C):
    conns = await open_conns(a, C)
    results = []          # (t_start rel, Utt)
    kept = {}             # (k, j) -> (plan item, audio bytes)
    t_level = time.monotonic()

    async def session(k, c):
        plan = Plan(a, texts, k)
        j = 0
        while time.monotonic() - t_level < a.level_s:
            item = plan.next()
            t_start = time.monotonic() - t_level
            u = await speak(c, item, plan.rate, keep=k < 4)
            results.append((t_start, u))
            if k < 4 and u.end == "done":
                kept[(k, j)] = (item, bytes(u.audio))
            j += 1

    await asyncio.gather(*(session(k, c) for k, c in enumerate(conns)))
    wall = time.monotonic() - t_level
    for c in conns:
        await c.close()
    fa, under, late, audio, words, text_s, ok, failed = [], 0, 0.0, 0.0, 0, 0.0, 0, 0
    t_end = a.skip
    for t_start, u in results:
        if t_start < a.skip:
            continue
        if u.end != "done" or not u.t_first:
            failed += 1
            print(f"serve_ws: utterance failed: {u.error or u.end or 'no audio'}", file=sys.stderr)
            continue
        ok += 1
        fa.append(u.t_first - u.t0)
        under += u.underruns > 0
        late = max(late, u.late)
        audio += u.samples / RATE
        words += u.words
        text_s += u.text_s
        t_end = max(t_end, u.t_last - t_level)
    xrt = audio / (t_end - a.skip) if t_end > a.skip else 0.0
    return dict(ok=ok, failed=failed, fa=fa, under=under, late=late, xrt=xrt, audio=audio,
                words=words, text_s=text_s, wall=wall, total=len(results), kept=kept)


def compare(a, kept):
    """bench_w1 --ts-dump's audio against the frames received: (ok, message)."""
    from_pcm16 = None
    try:
        from cosyvoice.audio import to_pcm16 as from_pcm16
    except Exception:
        pass

    def pcm16(x):
        if from_pcm16 is not None:
            return from_pcm16(x)
        return np.rint(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()

    index = {}
    path = os.path.join(a.compare, "index.tsv")
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                k, j, seed, mt, text = line.rstrip("\n").split("\t", 4)
                index[(int(k), int(j))] = (int(seed), int(mt), text)
    except OSError as e:
        return False, f"cannot read {path}: {e}"
    n, worst, bad = 0, 0, []
    for (k, j), (item, got) in sorted(kept.items()):
        if (k, j) not in index:
            continue
        text, _, seed, mt = item
        if index[(k, j)] != (seed, mt, text):
            bad.append(f"s{k}_u{j}: draws differ (bench_w1 {index[(k, j)]}, here {(seed, mt, text)})")
            continue
        f32 = os.path.join(a.compare, f"s{k}_u{j}.f32")
        if not os.path.exists(f32):
            continue
        want = pcm16(np.fromfile(f32, dtype="<f4"))
        n += 1
        if len(want) != len(got):
            bad.append(f"s{k}_u{j}: {len(got) // 2} samples, in process {len(want) // 2}")
            continue
        d = np.abs(np.frombuffer(got, "<i2").astype(np.int32) - np.frombuffer(want, "<i2"))
        m = int(d.max()) if d.size else 0
        worst = max(worst, m)
        if m > a.tolerance:
            bad.append(f"s{k}_u{j}: {int((d > 0).sum())} of {d.size} samples differ, by up to {m}")
    if not n and not bad:
        return False, "no utterance to compare (none made by both runs)"
    detail = f"{n} utterances of sessions 0-3 against bench_w1's ({a.compare}), largest " \
             f"difference {worst} (16-bit steps; tolerance {a.tolerance})"
    if bad:
        return False, detail + "; " + "; ".join(bad[:4])
    return True, detail


def print_header():
    print(f"{'C':>5} {'utts':>5} {'fail':>4} {'fa_p50':>10} {'fa_p95':>10} {'fa_p99':>10} "
          f"{'underrun':>8} {'late_max':>9} {'xRT':>7} {'words':>6} {'audio_s':>7} {'text_s':>7}")


async def cmd_run(a, texts):
    print(f"serve_ws: W4 text stream through {a.url} (voice {a.voice}): each session writes at a "
          f"rate drawn uniformly in {a.wps_min:g}-{a.wps_max:g} words/s (seed {a.seed}), "
          f"utterances of {a.ts_lines} lines pushed word by word, max_tokens = "
          f"{a.ts_tokens_per_word:g} x words, levels of {a.level_s:g} s, the first {a.skip:g} s "
          "not counted; fa = first audio after the first piece sent")
    print_header()
    rc = 0
    for C in a.levels:
        r = await run_level(a, texts, C)
        fa, ok = r["fa"], r["ok"]
        n = max(ok, 1)
        print(f"{C:5d} {ok:5d} {r['failed']:4d} {1e3 * pct(fa, 0.5):8.1f}ms "
              f"{1e3 * pct(fa, 0.95):8.1f}ms {1e3 * pct(fa, 0.99):8.1f}ms {r['under']:8d} "
              f"{1e3 * r['late']:7.1f}ms {r['xrt']:7.2f} {r['words'] / n:6.1f} "
              f"{r['audio'] / n:7.2f} {r['text_s'] / n:7.2f}")
        print(f"      level {r['wall']:.1f} s; {r['total']} utterances, "
              f"{r['total'] - ok - r['failed']} started in the first {a.skip:g} s not counted")
        if not ok and not r["failed"]:
            print(f"      (no utterance counted: every one started in the first {a.skip:g} s; a "
                  "longer --level-s)")
        if r["failed"]:
            print(f"      ({r['failed']} counted utterances failed)")
            rc = 1
        if a.compare:
            good, msg = compare(a, r["kept"])
            print(f"ws audio check: {'PASS' if good else 'FAIL'}: C = {C}: {msg}")
            if not good:
                rc = 1
        sys.stdout.flush()
    return rc


# ---- cancel: barge-in -------------------------------------------------------------------------
def health(a):
    with urllib.request.urlopen(a.url.rstrip("/") + "/health", timeout=10) as r:
        h = json.loads(r.read())
    return h["active"], h["queued"]


async def wait_free(a, base):
    """Seconds until /health's active and queued counts are back to base (None: not in time)."""
    t0 = time.monotonic()
    while True:
        now = await asyncio.to_thread(health, a)
        if now[0] <= base[0] and now[1] <= base[1]:
            return time.monotonic() - t0
        if time.monotonic() - t0 > a.free_timeout:
            return None
        await asyncio.sleep(0.005)


async def cmd_cancel(a, texts):
    C = max(a.levels)
    print(f"serve_ws: barge-in through {a.url} (voice {a.voice}): {C} sessions x {a.rounds} "
          f"rounds, each an utterance of W4 (rates {a.wps_min:g}-{a.wps_max:g} words/s, seed "
          f"{a.seed}) cancelled at a uniform time in [0, {a.cancel_max:g}) s after its first audio")
    conns = await open_conns(a, C)
    plans = [Plan(a, texts, k) for k in range(C)]
    t_last, t_ev, first_s, freed, done_first, failed = [], [], [], [], 0, 0
    rc = 0
    for rnd in range(a.rounds):
        base = await asyncio.to_thread(health, a)

        async def one(k):
            plan = plans[k]
            item = plan.next()
            start = plan.rng.unif()
            at = a.cancel_max * plan.rng.unif()
            await asyncio.sleep(start)
            return await speak(conns[k], item, plan.rate, keep=False, cancel_at=at)

        us = await asyncio.gather(*(one(k) for k in range(C)))
        for u in us:
            if u.end == "cancelled" and u.t_cancel:
                t_last.append(max(u.t_last_after_cancel - u.t_cancel, 0.0))
                t_ev.append(u.t_end_event - u.t_cancel)
                first_s.append(u.first_n / RATE)
            elif u.end == "done":
                done_first += 1
            else:
                failed += 1
                print(f"serve_ws: round {rnd}: utterance failed: {u.error or u.end}",
                      file=sys.stderr)
        w = await wait_free(a, base)
        freed.append(w)
        if w is None:
            now = await asyncio.to_thread(health, a)
            print(f"ws cancel: round {rnd}: engine active/queued {now[0]}/{now[1]} not back to "
                  f"{base[0]}/{base[1]} within {a.free_timeout:g} s")
    for c in conns:
        await c.close()
    n = len(t_last)
    chunk = float(np.median(first_s)) if first_s else 0.0
    p95 = pct(t_last, 0.95)
    print(f"ws cancel: {n} cancels ({done_first} utterances ended before their cancel, "
          f"{failed} failed)")
    print(f"ws cancel: cancel -> last audio frame p50 {1e3 * pct(t_last, 0.5):.1f} ms p95 "
          f"{1e3 * p95:.1f} ms max {1e3 * max(t_last, default=0):.1f} ms; cancel -> cancelled "
          f"event p50 {1e3 * pct(t_ev, 0.5):.1f} ms p95 {1e3 * pct(t_ev, 0.95):.1f} ms max "
          f"{1e3 * max(t_ev, default=0):.1f} ms")
    within = n > 0 and p95 <= chunk
    print(f"ws cancel: one chunk (the first audio frame, median) {1e3 * chunk:.0f} ms: p95 <= one "
          f"chunk: {'yes' if within else 'no'}")
    back = [w for w in freed if w is not None]
    all_back = len(back) == len(freed)
    print(f"ws cancel: engine state freed after every round: {'yes' if all_back else 'NO'} "
          f"({len(back)} of {len(freed)} rounds back to their active/queued counts"
          + (f", within {1e3 * max(back):.0f} ms of the last event)" if back else ")"))
    if not all_back or failed or n == 0:
        rc = 1
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=("run", "cancel"))
    ap.add_argument("--url", required=True, help="the server, http://HOST:PORT")
    ap.add_argument("--voice", default="w1")
    ap.add_argument("--concurrency", default="64", help="levels (run) or sessions (cancel)")
    ap.add_argument("--text-stream", default="20,40", metavar="WPS_MIN,WPS_MAX")
    ap.add_argument("--ts-lines", type=int, default=2)
    ap.add_argument("--ts-tokens-per-word", type=float, default=8)
    ap.add_argument("--texts", default="../shared/bench/w1_texts.txt")
    ap.add_argument("--level-s", type=float, default=40)
    ap.add_argument("--skip", type=float, default=10)
    ap.add_argument("--seed", type=lambda s: int(s, 0), default=1)
    ap.add_argument("--compare", metavar="DIR", help="bench_w1 --ts-dump's folder")
    ap.add_argument("--tolerance", type=int, default=0,
                    help="largest difference in 16-bit steps that passes (default 0: same bytes)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cancel-max", type=float, default=0.5)
    ap.add_argument("--free-timeout", type=float, default=5)
    a = ap.parse_args()
    try:
        a.wps_min, a.wps_max = (float(x) for x in a.text_stream.split(","))
        a.levels = [int(x) for x in a.concurrency.split(",")]
    except ValueError:
        ap.error("--text-stream WPS_MIN,WPS_MAX and --concurrency C1,C2,... are numbers")
    if not (0 < a.wps_min <= a.wps_max <= 1000) or not a.levels or min(a.levels) < 1:
        ap.error("--text-stream: 0 < WPS_MIN <= WPS_MAX <= 1000; --concurrency: positive counts")
    if not (1 <= a.ts_lines <= 64 and 1 <= a.ts_tokens_per_word <= 100):
        ap.error("--ts-lines must be in 1..64 and --ts-tokens-per-word in 1..100")
    if not (a.level_s > 0 and 0 <= a.skip < a.level_s) or a.rounds < 1 or a.cancel_max < 0:
        ap.error("--level-s > 0, 0 <= --skip < --level-s, --rounds >= 1, --cancel-max >= 0")
    texts = read_lines(a.texts)
    if not texts:
        ap.error(f"no text in {a.texts}")
    coro = (cmd_run if a.cmd == "run" else cmd_cancel)(a, texts)
    try:
        import uvloop   # as uvicorn takes it when installed
        if hasattr(uvloop, "run"):
            return uvloop.run(coro)
    except ImportError:
        pass
    return asyncio.run(coro)


if __name__ == "__main__":
    sys.exit(main())
