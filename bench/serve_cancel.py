#!/usr/bin/env python3
"""serve_cancel.py - how long a speech server's engine keeps a request whose client has left.

    python3 bench/serve_cancel.py --url http://127.0.0.1:8000 --voice w1 [--trials 10] [--load 8]

A raw socket sends POST /v1/audio/speech (a long utterance: min_tokens = max_tokens = 400) and
closes (a) as soon as /health shows the request in the engine, before any audio came, and (b)
after the first audio bytes (mid-stream); the time from the close until /health shows the
engine's active and queued counts back where they were is the row. --load N keeps N other long
streams running meanwhile (read to the end by threads), so the engine is busy as in service.
Prints, per case, the trials' p50 and max in ms. The aim: within 1 s, which a GPU meets when its
engine calls take milliseconds (docs/serving.md, "Clients that leave").
Standard library only (the server's own /health is the probe).
"""
import argparse
import json
import select
import socket
import statistics
import threading
import time
import urllib.parse
import urllib.request


def health(url):
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        return json.loads(r.read())


def busy(h):
    return h["active"] + h["queued"]


def send(host, port, body):
    data = json.dumps(body).encode()
    s = socket.create_connection((host, port), timeout=60)
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def wait(url, pred, limit):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        h = health(url)
        if pred(h):
            return time.monotonic() - t0, h
        time.sleep(0.005)
    return None, health(url)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--voice", required=True)
    ap.add_argument("--model", default="cosyvoice3")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--load-tokens", type=int, default=1500,
                    help="speech tokens of each load stream (long, so that they rarely restart "
                         "during a trial: a restart moves the engine's count the probe reads)")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    body = {"model": a.model, "voice": a.voice, "response_format": "pcm", "min_tokens": 400,
            "max_tokens": 400, "input": "A long utterance that keeps the engine busy for a while."}
    stop = threading.Event()

    def loader(i):
        while not stop.is_set():
            s = send(host, port, dict(body, seed=1000 + i, min_tokens=a.load_tokens,
                                      max_tokens=a.load_tokens))
            try:
                while s.recv(65536) and not stop.is_set():
                    pass
            except OSError:
                pass
            s.close()

    threads = [threading.Thread(target=loader, args=(i,), daemon=True) for i in range(a.load)]
    for t in threads:
        t.start()
    if a.load:
        wait(a.url, lambda h: busy(h) >= a.load, 60)
    rows = {"before first audio": [], "mid-stream": []}
    missed = 0
    for k in range(a.trials):
        for case in rows:
            base = busy(health(a.url))
            s = send(host, port, dict(body, seed=k))
            if case == "before first audio":
                t, _ = wait(a.url, lambda h: busy(h) > base, 30)
                if select.select([s], [], [], 0)[0]:
                    missed += 1   # the audio was faster than the probe: not this case
                    s.close()
                    wait(a.url, lambda h: busy(h) <= base, 30)
                    continue
            else:
                s.settimeout(60)
                s.recv(4096)
            s.close()
            dt, h = wait(a.url, lambda h: busy(h) <= base, 30)
            rows[case].append(dt if dt is not None else float("inf"))
    stop.set()
    print(f"serve_cancel: {a.trials} trials, load {a.load} streams"
          + (f", {missed} before-first-audio trials missed (audio came first)" if missed else ""))
    for case, xs in rows.items():
        if xs:
            print(f"  {case:>18}: p50 {1e3 * statistics.median(xs):7.1f} ms   max "
                  f"{1e3 * max(xs):7.1f} ms   ({len(xs)} trials)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
