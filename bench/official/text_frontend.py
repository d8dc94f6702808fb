#!/usr/bin/env python3
"""Time the official CosyVoice front end on the texts of bench/bench_text.c: text_normalize(text,
split=True) (wetext + inflect + frontend_utils, as tools/golden_text.py runs it) and the
tokenizer's encode of every segment, per 1,000 characters, on one core.

    taskset -c 0 python3 bench/official/text_frontend.py --cosyvoice DIR --tokenizer TOKDIR \
        [TEXT.txt ...] [--iters N] [--repeat R]

Needs what tools/golden_text.py needs (wetext, inflect, regex, transformers; a CosyVoice checkout).
Prints, per text: characters, segments, tokens, the median and the best of N runs after one
warm-up run, and ms per 1,000 characters.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import golden_text as G  # noqa: E402


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text")
    ap = argparse.ArgumentParser()
    ap.add_argument("texts", nargs="*", default=[os.path.join(here, "en.txt"),
                                                 os.path.join(here, "zh.txt")])
    ap.add_argument("--cosyvoice", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="use each file's content R times over")
    a = ap.parse_args()
    import inflect
    import wetext
    fu = G.load_module(os.path.join(a.cosyvoice, "cosyvoice", "utils", "frontend_utils.py"), "fu")
    text_normalize = G.load_text_normalize(os.path.join(a.cosyvoice, "cosyvoice", "cli",
                                                        "frontend.py"), fu)

    class FE:
        pass
    fe = FE()
    fe.text_frontend = "wetext"
    fe.zh_tn_model = wetext.Normalizer(remove_erhua=False)
    fe.en_tn_model = wetext.Normalizer()
    fe.inflect_parser = inflect.engine()
    fe.tokenizer = G.Tok(a.tokenizer)
    fe.allowed_special = "all"
    for path in a.texts:
        with open(path, encoding="utf-8") as fh:
            text = fh.read() * max(1, a.repeat)
        times = []
        for it in range(a.iters + 1):
            t0 = time.perf_counter()
            segs = text_normalize(fe, text, split=True)
            ntok = sum(len(fe.tokenizer.encode(s)) for s in segs)
            if it:
                times.append(time.perf_counter() - t0)
        times.sort()
        med = times[len(times) // 2]
        print("%s x%d: %d chars, %d segments, %d tokens: median %.2f ms (best %.2f), %.2f ms per 1000 "
              "chars" % (path, a.repeat, len(text), len(segs), ntok, med * 1e3, times[0] * 1e3,
                         med * 1e6 / len(text)))


if __name__ == "__main__":
    main()
