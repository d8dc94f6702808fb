#!/usr/bin/env python3
"""Summarize a COSY_SCHED_TRACE file (lines: start_s call rows size firsts ms).

Per call kind: count, mean rows, mean / p95 call time, busy share of the traced span; for the
LLM steps also the mean interval between consecutive step starts (how often each decoding
sequence gets a token) and the split of that interval into step, prefill and other time.
Usage: trace_summary.py TRACE [TRACE ...]"""
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0.0


for path in sys.argv[1:]:
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 6:
                rows.append((float(p[0]), p[1], int(p[2]), int(p[3]), int(p[4]), float(p[5])))
    if not rows:
        print(f"{path}: empty")
        continue
    t0 = min(r[0] for r in rows)
    t1 = max(r[0] + r[5] / 1e3 for r in rows)
    span = t1 - t0
    print(f"{path}: {len(rows)} calls over {span:.3f} s")
    for kind in ("prefill", "step", "flow", "vocoder", "held", "yield", "pause", "admit", "check", "tokens", "lock"):
        rs = [r for r in rows if r[1] == kind]
        if not rs:
            continue
        ms = [r[5] for r in rs]
        busy = sum(ms) / 1e3
        print(f"  {kind:8s} n {len(rs):5d}  rows mean {sum(r[2] for r in rs) / len(rs):6.1f}  "
              f"ms mean {sum(ms) / len(ms):7.2f} p95 {pct(ms, 0.95):7.2f}  busy {100 * busy / span:5.1f}%"
              + (f"  firsts {sum(r[4] for r in rs)}" if kind in ("flow", "vocoder") else ""))
    st = sorted(r[0] for r in rows if r[1] == "step")
    if len(st) > 1:
        gaps = [b - a for a, b in zip(st, st[1:])]
        print(f"  step interval: mean {1e3 * sum(gaps) / len(gaps):.2f} ms, p50 {1e3 * pct(gaps, 0.5):.2f}, "
              f"p95 {1e3 * pct(gaps, 0.95):.2f}, max {1e3 * max(gaps):.2f}")
