#!/usr/bin/env python3
"""serve_multi_w1.py - workload W1 through several servers at once (one per GPU), the clients
spread over them: client k of a level talks to server k % servers, as `bench_w1 --device 0,1`
binds client k to engine k % engines.

    # one HTTP server process per GPU (docs/serving.md, "Several GPUs"):
    CUDA_VISIBLE_DEVICES=0 python3 -m cosyvoice.server --model MODEL --voices VOICES \
        --device 0 --max-active 256 --port 8000 &
    CUDA_VISIBLE_DEVICES=1 python3 -m cosyvoice.server --model MODEL --voices VOICES \
        --device 0 --max-active 256 --port 8001 &
    python3 bench/serve_multi_w1.py http --url http://127.0.0.1:8000,http://127.0.0.1:8001 \
        --concurrency 128 --texts ../shared/bench/w1_texts.txt

The clients, the requests (text i, seed 1000 + i, --tokens speech tokens), the measures and the
row are bench/serve_w1.py's (its header), which this script imports; the row is over all the
requests of the level (per server: each server's /metrics). --warmup requests go to each server
before the first level. `triton` takes several gRPC addresses alike. bench/serve_device_run.sh's
multi step runs it with one server (C = 64) and with two (C = 128).
"""
import argparse
import itertools
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_w1  # noqa: E402  (bench/serve_w1.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("http", "triton"))
    ap.add_argument("--url", required=True,
                    help="comma-separated: http://HOST:PORT,... (http) or HOST:PORT,... (triton)")
    ap.add_argument("--voice", default="w1", help="saved voice name on the servers")
    ap.add_argument("--model", help="model name (default cosyvoice3 / cosyvoice)")
    ap.add_argument("--concurrency", default="1")
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=112)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--texts", default="../shared/bench/w1_texts.txt")
    a = ap.parse_args()
    urls = [u.strip() for u in a.url.split(",") if u.strip()]
    if not urls or a.tokens < 1 or a.requests < 0 or a.warmup < 0:
        sys.exit("serve_multi_w1: --url needs an address; --tokens >= 1, --requests and "
                 "--warmup >= 0")
    with open(a.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    if not texts:
        sys.exit(f"serve_multi_w1: no texts in {a.texts}")
    levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        sys.exit(f"serve_multi_w1: bad --concurrency {a.concurrency!r}")
    cls = serve_w1.HttpClient if a.mode == "http" else serve_w1.TritonClient
    model = a.model or ("cosyvoice3" if a.mode == "http" else "cosyvoice")
    print(f"serve_multi_w1: {a.mode} {len(urls)} server(s) {', '.join(urls)}, client k on server "
          f"k % {len(urls)}, voice {a.voice}, {a.tokens} tokens/request, texts {a.texts}",
          flush=True)
    for u in urls:   # not measured (the first calls build CUDA graphs and plans)
        cl = cls(u, a.voice, model)
        for w in range(a.warmup):
            cl.run(texts[w % len(texts)], 1, a.tokens)
        cl.close()
    print(f"{a.warmup} warm-up requests done on each server")
    print(f"{'C':>5} {'reqs':>5} {'ttfb_p50':>9} {'ttfb_p95':>9} {'rtf_p50':>8} {'rtf_p95':>8} "
          f"{'xRT':>7} {'underrun':>9} {'chars/s':>9}")
    ok = True
    for C in levels:   # each level starts again at text 0 and seed 1000, as in bench_w1
        total = a.requests or (8 if C < 4 else 2 * C)
        nxt = itertools.count()
        lock = threading.Lock()

        def make():   # level() makes one client per worker thread: worker k gets server k % n
            with lock:
                k = next(nxt)
            return cls(urls[k % len(urls)], a.voice, model)

        r = serve_w1.level(make, texts, C, total, a.tokens, 0)
        ok &= bool(r[0] if isinstance(r, tuple) else r)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
